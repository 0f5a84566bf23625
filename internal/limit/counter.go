package limit

import (
	"context"
	"time"
)

// Key names one counter in the shared store. The store renders it with its
// prefix and a hash tag around ID, so everything about one subject lives in
// one Redis Cluster slot: Key{"otp", "+919800000000", "sends"} becomes
// "og:otp:{+919800000000}:sends".
type Key struct {
	Space string // "otp", "otp:ip", "l:api" (PolicyKey)
	ID    string // the subject: a number, an address, a caller's key
	Name  string // which counter of the subject: "sends", "cooldown"; "" for a limit (PolicyKey)
}

// Take asks the store to spend Cost from one counter.
type Take struct {
	Key       Key
	Algorithm Algorithm
	Limit     int64         // fixed window: events per window; token bucket: capacity
	Window    time.Duration // fixed window length
	// Slice (fixed window, counting hits only; 0: none) keeps the window
	// as a sliding one: its count is the sum of the slices of this length
	// (the store's clock) that the last Window covers, so that no span of
	// Window holds more than Limit, where two back-to-back fixed windows
	// can hold twice it. Result.WindowID then names the hit's slice, for
	// its refund. Where the store cannot answer, the fallback keeps it as
	// a fixed window.
	Slice time.Duration
	Rate  float64 // token bucket refill, tokens per second
	Cost  int64   // 0 peeks
	// SpendIfAllowed (fixed window): a denied hit writes nothing, as a
	// token bucket's never does. Unset, the hit that denies is counted:
	// OTP sends count every attempt ("the counter that denies keeps the
	// attempt"); /limits/check promises that a denied check spends nothing,
	// and this keeps that promise without a second round trip to refund.
	SpendIfAllowed bool
	// AllOrNothing (the checks of one /limits/check batch): the takes of
	// one Take call that all carry it spend together or not at all. A
	// store that decides them in one atomic step (one hash slot) spends
	// none of them when one that is not Shadow denies, or when one is
	// held; one that cannot (the batch spans Redis Cluster slots) spends
	// per step, and the caller refunds what Result.Spent says was spent.
	AllOrNothing bool
	// Shadow (with AllOrNothing): its denial does not stop the others.
	Shadow bool
	// Hold: decide, but spend nothing whatever the answer: the request is
	// already denied by a check decided elsewhere (this instance's memory
	// or hot-key counters). Only for takes a script decides alone (token
	// buckets, fixed windows with SpendIfAllowed).
	Hold bool
	// Independent (a fixed window of an Independent policy: the Envoy
	// rules): every hit counts, the one that denies included, and the take
	// is decided on its own. Unlike an OTP send's counting window it may be
	// decided by a script, one command that concurrent requests share a
	// write with, as /limits/check's are.
	Independent bool
	// Automatic: an automatic abuse rule's limit (a prefix or country
	// window). A send the velocity script finds trusted (VolumeTake.Mark)
	// does not keep it: on Redis Cluster, where the store reads the mark
	// first, it is not taken at all (trust.go).
	Automatic bool

	// What to do when the shared store cannot answer (see Fallback).
	Policy       string       // the policy it belongs to, for status and logs
	OnStoreError FallbackMode // "" is closed
	LocalLimit   int64        // with FallbackLocal: this instance's own limit
	// Fallback is set on a Take handed back to Refund when its Result says
	// the in-memory fallback decided it: the refund goes back there, not to
	// the shared store, which never counted it.
	Fallback bool
	// WindowID is set on a fixed-window Take handed back to Refund from
	// its Result's WindowID: the refund gives back only in the window the
	// hit counted in, never in one that started since. Zero: any window.
	WindowID int64
}

// Result is the store's answer to one Take.
type Result struct {
	Allowed    bool
	Limit      int64
	Remaining  int64
	Count      int64         // fixed window: the counter after this hit
	RetryAfter time.Duration // when denied: how long until Cost would be allowed
	ResetAfter time.Duration // how long until the counter is back to its full limit
	// Spent says the store changed the counter: a fixed window counts every
	// hit (the counter that denies keeps the attempt), a token bucket spends
	// only when it allows. Refund gives back what was spent.
	Spent bool
	// Fallback says the in-memory fallback decided, not the shared store
	// (it could not answer): Limit and Remaining are this instance's own.
	Fallback bool
	// WindowID names the fixed window a counting hit was counted in, for
	// Refund (Take.WindowID): an identity, not a time to compute with (the
	// store's is the window's end on Redis's clock). Zero: not known.
	WindowID int64
}

// Counter is the shared, atomic store of limits. Every Take is one atomic
// unit in the store, and one call travels in one round trip.
type Counter interface {
	Take(ctx context.Context, takes []Take) ([]Result, error)
	// Refund gives back what Take spent, for a request that was denied by
	// another of its checks. It never creates a counter.
	Refund(ctx context.Context, takes []Take) error
}

// SyncItem is what one instance counted on its own for one hot key since
// its last sync (local counters with periodic sync).
type SyncItem struct {
	Take        // the key and its policy; Cost is unused
	Delta int64 // spent locally, not yet in Redis
}

// SyncState is a hot key's global state after a sync.
type SyncState struct {
	Remaining  int64         // may be negative when the instances overshot
	ResetAfter time.Duration // fixed window: until the window ends
}
