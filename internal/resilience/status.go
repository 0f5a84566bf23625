package resilience

import (
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// FallbackStatus is what a Fallback knows of the store: its breaker, the
// instance count it splits by, and each policy's state.
type FallbackStatus struct {
	Breaker     string // closed, half-open or open: the worst of Nodes
	Nodes       []NodeStatus
	Instances   int
	LastFailure time.Time // zero: never
	MemoryKeys  int       // counters held by the in-memory limiter
	Policies    []PolicyStatus
}

// PolicyStatus is one policy as the Fallback last saw it.
type PolicyStatus struct {
	Policy       string // "otp" or "limits.<name>"
	OnStoreError limit.FallbackMode
	// InFallback says its last decision was taken without the store
	// (refused, for closed), since Since.
	InFallback bool
	Since      time.Time
	Fallbacks  int64 // decisions taken without the store since start
}

// policies is each policy's state as the decisions left it: whether its
// last decision went to the fallback, since when, and how many did.
type policies struct {
	log *slog.Logger
	now func() time.Time
	mu  sync.RWMutex
	m   map[string]*policyState
}

type policyState struct {
	mode       limit.FallbackMode
	inFallback bool
	since      time.Time
	fallbacks  int64
}

// newPolicies knows the policies of p (nil: none yet).
func newPolicies(p *guard.Policies, log *slog.Logger, now func() time.Time) *policies {
	ps := &policies{log: log, now: now, m: map[string]*policyState{}}
	if p != nil {
		ps.m[guard.OTPPolicyName] = &policyState{mode: p.OTP.OnStoreError}
		for name, l := range p.Limits {
			ps.m[limit.PolicyName(name)] = &policyState{mode: l.OnStoreError}
		}
	}
	return ps
}

// list is every policy's status, sorted by name.
func (ps *policies) list() []PolicyStatus {
	var out []PolicyStatus
	ps.mu.RLock()
	for name, p := range ps.m {
		out = append(out, PolicyStatus{Policy: name, OnStoreError: p.mode,
			InFallback: p.inFallback, Since: p.since, Fallbacks: p.fallbacks})
	}
	ps.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Policy < out[j].Policy })
	return out
}

// add is Fallback.AddPolicies.
func (ps *policies) add(limits map[string]limit.Policy) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for name, p := range limits {
		if _, ok := ps.m[limit.PolicyName(name)]; !ok {
			ps.m[limit.PolicyName(name)] = &policyState{mode: p.OnStoreError}
		}
	}
}

// InFallback lists the policies whose last decision went to the fallback.
func (s FallbackStatus) InFallback() []string {
	out := []string{}
	for _, p := range s.Policies {
		if p.InFallback {
			out = append(out, p.Policy)
		}
	}
	return out
}

// note records, per policy, whether its decisions go to the fallback, and
// logs each change once.
func (ps *policies) note(takes []limit.Take, fell bool) {
	if !fell && !ps.anyInFallback(takes) {
		return // the common case: read-locked only
	}
	now := ps.now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, t := range takes {
		if t.Policy == "" {
			continue
		}
		p := ps.m[t.Policy]
		if p == nil { // a policy not given in the options: its first take tells its mode
			p = &policyState{mode: mode(t)}
			ps.m[t.Policy] = p
		}
		if fell {
			p.fallbacks++
		}
		if p.inFallback == fell {
			continue
		}
		p.inFallback, p.since = fell, now
		if fell {
			ps.log.Info("policy in fallback: the shared store does not answer", "policy", t.Policy, "on_store_error", string(p.mode))
		} else {
			ps.log.Info("policy back on the shared store", "policy", t.Policy)
		}
	}
}

// anyInFallback reports whether a policy of takes is marked in fallback
// (or is not known yet).
func (ps *policies) anyInFallback(takes []limit.Take) bool {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	for _, t := range takes {
		if p := ps.m[t.Policy]; t.Policy != "" && (p == nil || p.inFallback) {
			return true
		}
	}
	return false
}

// leave marks every policy back on the store: a breaker closed, so the
// next decision of each goes to Redis.
func (ps *policies) leave() {
	now := ps.now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for name, p := range ps.m {
		if p.inFallback {
			p.inFallback, p.since = false, now
			ps.log.Info("policy back on the shared store", "policy", name)
		}
	}
}
