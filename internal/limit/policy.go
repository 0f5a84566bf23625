package limit

import "time"

// PolicyName is the name a limit policy goes by in Take.Policy and in
// the fallback's status: "limits." and its name, as in the policy file.
func PolicyName(name string) string { return "limits." + name }

// FallbackMode says what a policy does when the shared store cannot answer.
type FallbackMode string

// The fallback modes of a policy (on_store_error) (see the README, "When Redis is down").
const (
	FallbackClosed FallbackMode = "closed" // refuse with 503
	FallbackLocal  FallbackMode = "local"  // a strict per-instance limit (local_limit)
	FallbackOpen   FallbackMode = "open"   // allow through the split limit: limit / instances
)

// Algorithm names how a limit policy counts.
type Algorithm string

// The algorithms of /limits/check.
const (
	TokenBucket Algorithm = "token_bucket"
	FixedWindow Algorithm = "fixed_window"
)

// Policy is one named policy of /limits/check.
type Policy struct {
	Algorithm Algorithm
	// token_bucket
	Capacity        int64
	RefillPerSecond float64
	// fixed_window
	Limit  int64
	Window time.Duration

	Shadow       bool
	OnStoreError FallbackMode
	LocalLimit   int64

	// Mode "sync" counts locally and syncs every SyncInterval (hot keys);
	// "exact" (the default) asks Redis on every check.
	Mode         Mode
	SyncInterval time.Duration
	// Exact forbids sync mode on this policy, as a guard against a later edit.
	Exact bool
	// Independent decides each check of the policy on its own, as
	// envoyproxy/ratelimit decides a request's descriptors (internal/envoy):
	// another check's denial neither holds nor refunds it, and a fixed
	// window counts every hit, the one that denies included, so that a
	// cost above the limit is taken (it denies, and counts). Not in the
	// policy file: the Envoy rules set it.
	Independent bool
}

// Mode says where a limit policy's decisions are taken.
type Mode string

// The modes of a limit policy.
const (
	ModeExact Mode = "exact" // every check is one atomic step in Redis
	ModeSync  Mode = "sync"  // local counters with periodic sync
)

// The modes a Decision may carry besides a policy's own: how that one
// decision was taken. They are never a policy's mode (Validate refuses
// them there).
const (
	// ModeFallback: the shared store could not answer and the Fallback
	// decided from this instance's memory, by the policy's on_store_error.
	ModeFallback Mode = "fallback"
	// ModeMemory: a denial repeated from this instance's memory of an
	// exact denial that holds until a known time (Denials); as exact as
	// ModeExact, without a round trip.
	ModeMemory Mode = "memory"
)

// DefaultSyncInterval is a sync-mode policy's interval when it names none.
const DefaultSyncInterval = time.Second

// Max is the most a policy lets through at once: the bucket's capacity or
// the window's limit.
func (p Policy) Max() int64 {
	if p.Algorithm == TokenBucket {
		return p.Capacity
	}
	return p.Limit
}

// take is the Take of one check of p (space and name: PolicyKey's space and
// PolicyName of its policy). When the store cannot answer, the
// Fallback decides it by the policy's on_store_error (a batch holding a
// closed policy is refused whole).
func (p Policy) take(c Check, space, name string) Take {
	t := Take{Key: Key{Space: space, ID: c.Key}, Algorithm: p.Algorithm, Cost: c.Cost,
		Policy: name, OnStoreError: p.OnStoreError, LocalLimit: p.LocalLimit,
		AllOrNothing: true, Shadow: p.Shadow}
	switch p.Algorithm {
	case TokenBucket:
		t.Limit, t.Rate = p.Capacity, p.RefillPerSecond
	default:
		t.Limit, t.Window, t.SpendIfAllowed = p.Limit, p.Window, true
	}
	if p.Independent { // each on its own; a window counts every hit
		t.AllOrNothing, t.SpendIfAllowed, t.Independent = false, false, true
	}
	return t
}
