package resilience

import (
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// Shared keys on a dead master (Redis Cluster). A send's keys that are not
// the number's own (per IP, per prefix, per country, the SMS budget, the
// country's volume) belong to rules every number shares, each in a slot
// of its own. When the master of such a key does not answer, its rule is
// decided from this instance's memory, as the fallback decides any key:
// the split limit, limit / N (also under on_store_error closed, whose
// refusal is for the number's own keys), so a send to a number on a live
// master is never refused for another master's death. Each rule so
// decided is logged once per outage of its master (WARN) and counted
// (SharedFallbacks).

// sharedRules counts, per rule, the decisions taken from memory because
// the rule's key was on a node that did not answer.
type sharedRules struct {
	memory *memory // what a rule is decided with, and the instances it splits by
	log    *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	counts map[string]int64
	// limits is the last limit the store answered for a country's volume
	// (per counting key: the velocity rule's, the trusted tier's, the
	// solved cap's): what its split limit divides while its master is dead.
	limits map[limit.Key]int64
}

// ruleOf names the rule of a key, without its subject: "otp:ip:sends",
// "otp:budget:hour", "otp:vel:h", "l:api". A few names in all.
func ruleOf(k limit.Key) string {
	return strings.TrimSuffix(k.Space+":"+k.Name, ":")
}

// fell notes that rule was decided from memory because node n did not
// answer: counted each time, logged once per outage of n.
func (s *sharedRules) fell(n *node, rule string) {
	s.mu.Lock()
	if s.counts == nil {
		s.counts = map[string]int64{}
	}
	s.counts[rule]++
	s.mu.Unlock()
	if n.warnOnce(rule) {
		s.log.Warn("shared limit decided from this instance's memory (split limit): its Redis master does not answer",
			"rule", rule, "node", n.name, "instances", s.memory.Instances())
	}
}

// counted is Fallback.SharedFallbacks.
func (s *sharedRules) counted() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

// rememberVolume keeps the limit the store answered for vol (vr), for its
// split limit should its master die. A carrier's refusal answers the
// carrier's limit, not the country's: it is not kept.
func (s *sharedRules) rememberVolume(vol *guard.VolumeTake, vr *guard.VolumeResult) {
	if vr == nil || vr.Limit <= 0 || vr.Reused || vr.Carrier {
		return
	}
	k := vol.Key
	if vr.Trusted {
		k = vol.TrustedKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limits == nil {
		s.limits = map[limit.Key]int64{}
	}
	s.limits[k] = vr.Limit
}

// volumeLimit is the hour's limit to split for the counts under k: the
// store's last answer, or floor when this instance has none.
func (s *sharedRules) volumeLimit(k limit.Key, floor int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.limits[k]; ok {
		return l
	}
	return floor
}

// volumeFromMemory decides vol on this instance while its node n does not
// answer: the hour's count under the split limit of the last limit the
// store gave (the floor if none); a solved send is left to the caller,
// which cannot check its single use here. An untrusted send with the
// velocity rule off (NewOff) counts nothing. The result says Fallback:
// nothing was counted in the store.
func (s *sharedRules) volumeFromMemory(n *node, vol *guard.VolumeTake) *guard.VolumeResult {
	if vol.NewOff && !vol.Trusted {
		return &guard.VolumeResult{Allowed: true, Fallback: true}
	}
	now := s.now()
	take := func(k limit.Key, lim int64, window time.Duration) limit.Result {
		return s.memory.limits.take(limit.Take{Key: k, Algorithm: limit.FixedWindow, Limit: lim, Window: window, Cost: 1,
			Policy: guard.OTPPolicyName}, lim, 0, now)
	}
	k, floor := vol.Key, vol.Floor
	if vol.Trusted {
		k, floor = vol.TrustedKey, vol.TFloor
	}
	s.fell(n, ruleOf(k))
	if vol.Solved != nil {
		// A solution's single use is the store's to check: one
		// instance's memory would let it be spent once per instance. The
		// send refuses it (503), so nothing is counted here.
		return &guard.VolumeResult{Allowed: true, Fallback: true}
	}
	lim := max(1, s.volumeLimit(k, max(1, floor))/int64(s.memory.Instances()))
	r := take(k, lim, time.Hour)
	return &guard.VolumeResult{Allowed: r.Allowed, Count: r.Count, Limit: lim, Trusted: vol.Trusted, Fallback: true}
}

// warnOnce reports whether rule is first to fall back on n in this outage
// of n (until its breaker closes again).
func (n *node) warnOnce(rule string) bool {
	n.warnMu.Lock()
	defer n.warnMu.Unlock()
	if n.warned[rule] {
		return false
	}
	if n.warned == nil {
		n.warned = map[string]bool{}
	}
	n.warned[rule] = true
	return true
}

// recovered forgets the rules warned of: n's breaker closed, its outage
// is over.
func (n *node) recovered() {
	n.warnMu.Lock()
	n.warned = nil
	n.warnMu.Unlock()
}
