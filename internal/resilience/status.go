package resilience

import (
	"sort"
	"time"

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

// Status reports the breaker and the policies, sorted by name.
func (f *Fallback) Status() FallbackStatus {
	s := FallbackStatus{Instances: f.Instances(), LastFailure: f.LastFailure(), MemoryKeys: f.local.len()}
	s.Breaker, s.Nodes = f.nodeStatus()
	f.mu.RLock()
	for name, p := range f.policies {
		s.Policies = append(s.Policies, PolicyStatus{Policy: name, OnStoreError: p.mode,
			InFallback: p.inFallback, Since: p.since, Fallbacks: p.fallbacks})
	}
	f.mu.RUnlock()
	sort.Slice(s.Policies, func(i, j int) bool { return s.Policies[i].Policy < s.Policies[j].Policy })
	return s
}

// AddPolicies makes the limit policies of limits known that are not yet
// (Envoy's rules, a reload's new names), so that Status lists them, and
// their count of fallback decisions starts at zero, before their first
// decision rather than at it.
func (f *Fallback) AddPolicies(limits map[string]limit.Policy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, p := range limits {
		if _, ok := f.policies[limit.PolicyName(name)]; !ok {
			f.policies[limit.PolicyName(name)] = &policyState{mode: p.OnStoreError}
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
func (f *Fallback) note(takes []limit.Take, fell bool) {
	if !fell && !f.anyInFallback(takes) {
		return // the common case: read-locked only
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range takes {
		if t.Policy == "" {
			continue
		}
		p := f.policies[t.Policy]
		if p == nil { // a policy not given in the options: its first take tells its mode
			p = &policyState{mode: mode(t)}
			f.policies[t.Policy] = p
		}
		if fell {
			p.fallbacks++
		}
		if p.inFallback == fell {
			continue
		}
		p.inFallback, p.since = fell, now
		if fell {
			f.log.Info("policy in fallback: the shared store does not answer", "policy", t.Policy, "on_store_error", string(p.mode))
		} else {
			f.log.Info("policy back on the shared store", "policy", t.Policy)
		}
	}
}

// anyInFallback reports whether a policy of takes is marked in fallback
// (or is not known yet).
func (f *Fallback) anyInFallback(takes []limit.Take) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, t := range takes {
		if p := f.policies[t.Policy]; t.Policy != "" && (p == nil || p.inFallback) {
			return true
		}
	}
	return false
}

// leaveFallback marks every policy back on the store: the breaker closed,
// so the next decision of each goes to Redis.
func (f *Fallback) leaveFallback() {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, p := range f.policies {
		if p.inFallback {
			p.inFallback, p.since = false, now
			f.log.Info("policy back on the shared store", "policy", name)
		}
	}
}
