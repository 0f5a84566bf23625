package resilience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// FallbackOptions are the dependencies and settings of a Fallback.
type FallbackOptions struct {
	Counter limit.Counter
	Codes   guard.Codes // may be nil when only the Counter is used
	// Timeout bounds every store call (OTPGUARD_REDIS_TIMEOUT). The store's
	// client must hold the same bound on its own (dial, pool, read, write);
	// this deadline covers the sum. 0 leaves it to the client.
	Timeout time.Duration
	// Ceiling bounds a call while the probe says Redis is healthy: a call
	// past Timeout is then still waited for (time queued inside a saturated
	// otpguard is not Redis failing), up to Ceiling, after which the
	// decision is shed as overloaded (default 1s; never below Timeout).
	Ceiling time.Duration
	// ProbeEvery is how often the probe reports (ObserveProbe); its last
	// verdict vouches for Redis (healthy), up to ten rounds of
	// ProbeEvery+ProbeTimeout old. Defaults 50ms and 100ms. Without probe reports, a call past
	// Timeout is a store failure, as it always was.
	ProbeEvery, ProbeTimeout time.Duration
	// Warm, when set, is what the probe runs through the decision client
	// to end an outage (half-open): it dials the decision pool outside any
	// decision's timeout, so recovery never needs a dial inside one.
	Warm func(ctx context.Context) error
	// Instances returns the number of live instances that share the
	// policies' limits, for the split limit of "open"; nil means 1.
	Instances func() int
	Breaker   BreakerOptions
	// NodeOf, on Redis Cluster, names the node (the master's address) that
	// holds a key: each node has its own breaker and probe verdict, and a
	// call's takes are decided per node, so one master's death sends only
	// its own keys to the fallback (nodes.go). nil: one node.
	NodeOf func(limit.Key) string
	// MemoryKeys bounds the in-memory limiter (DefaultMemoryKeys when 0).
	MemoryKeys int
	// Policies, when given, are listed by Status before their first decision.
	Policies *guard.Policies
	Logger   *slog.Logger
	Now      func() time.Time // time.Now when nil
}

// Fallback is a Counter and Codes that wraps the shared store with a
// timeout and a breaker, and decides from memory, per each Take's policy
// (OnStoreError), when the store cannot answer:
//
//   - closed (and ""): the call fails; the caller answers 503.
//   - local: a strict limit of LocalLimit per key on this instance.
//   - open: the split limit, the policy's limit divided by the live
//     instances (rounded down, at least 1), on this instance.
//
// A call that timed out may still have counted in the store: it is never
// retried; its decision is taken by the fallback, as unknown.
type Fallback struct {
	counter   limit.Counter
	codes     guard.Codes
	timeout   time.Duration
	ceiling   time.Duration
	fresh     time.Duration // one probe round, ProbeEvery + ProbeTimeout
	probeTO   time.Duration
	warm      func(ctx context.Context) error
	instances func() int
	local     *memoryLimits
	log       *slog.Logger
	now       func() time.Time
	abandoner Abandoner // the counter, when it says which Takes abandon (inline.go)
	waits     sync.Pool // *inlineWait, each with its timer (inline.go)

	lastFailure atomic.Int64 // unix nanoseconds of the last failed store call
	// nodes are the store's nodes, each with its breaker and the probe's
	// verdict on it (nodes.go): one ("") on a single Redis or Sentinel, a
	// master each on Redis Cluster. nodeOf names a key's node.
	nodeOf  func(limit.Key) string
	breaker BreakerOptions
	nodesMu sync.RWMutex
	nodes   map[string]*node
	shared  sharedRules  // shared keys decided from memory (shared.go)
	shed    atomic.Int64 // calls given up on while Redis was healthy
	late    atomic.Int64 // calls answered past the timeout by a healthy Redis

	mu       sync.RWMutex
	policies map[string]*policyState
}

type policyState struct {
	mode       limit.FallbackMode
	inFallback bool
	since      time.Time
	fallbacks  int64
}

// NewFallback returns a Fallback over o.Counter (and o.Codes).
func NewFallback(o FallbackOptions) *Fallback {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Instances == nil {
		o.Instances = func() int { return 1 }
	}
	if o.Ceiling < max(o.Timeout, time.Millisecond) {
		o.Ceiling = max(time.Second, o.Timeout)
	}
	if o.ProbeEvery <= 0 {
		o.ProbeEvery = DefaultProbeEvery
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	f := &Fallback{
		counter: o.Counter, codes: o.Codes, timeout: o.Timeout, instances: o.Instances,
		ceiling: o.Ceiling, fresh: o.ProbeEvery + o.ProbeTimeout, probeTO: o.ProbeTimeout, warm: o.Warm,
		local: newMemoryLimits(o.MemoryKeys), log: o.Logger, now: o.Now,
		policies: map[string]*policyState{},
	}
	if o.Policies != nil {
		f.policies[guard.OTPPolicyName] = &policyState{mode: o.Policies.OTP.OnStoreError}
		for name, p := range o.Policies.Limits {
			f.policies[limit.PolicyName(name)] = &policyState{mode: p.OnStoreError}
		}
	}
	f.breaker, f.nodeOf, f.nodes = o.Breaker.withDefaults(), o.NodeOf, map[string]*node{}
	f.abandoner, _ = o.Counter.(Abandoner)
	return f
}

func (f *Fallback) failed() { f.lastFailure.Store(f.now().UnixNano()) }

// Observe takes the result of a call made outside the Fallback (the
// heartbeat), so LastFailure sees an outage even with no traffic.
func (f *Fallback) Observe(err error) {
	if err != nil {
		f.failed()
	}
}

// LastFailure is when a store call last failed (zero: never).
func (f *Fallback) LastFailure() time.Time {
	n := f.lastFailure.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Take asks the store; when it cannot answer, it decides every take from
// memory by its policy's mode, or fails the whole call if any take's mode
// is closed.
//
// On Redis Cluster the takes are decided per node (takeByNode).
func (f *Fallback) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if f.multiNode() {
		res, _, err := f.takeByNode(ctx, takes, nil, false)
		return res, err
	}
	res, _, err := f.take(ctx, f.node(""), takes, false, f.abandons(takes), nil)
	return res, err
}

var _ guard.SendCounter = (*Fallback)(nil)

// TakeSend takes a send's limits and vol in one store call when the store
// is a SendCounter (otherwise vol is not taken: nil VolumeResult). When
// the store cannot answer, the takes are decided as Take decides them and
// vol is not taken.
func (f *Fallback) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	if f.multiNode() {
		return f.takeSendByNode(ctx, takes, vol) // the trust mark first (trust.go)
	}
	sc, ok := f.counter.(guard.SendCounter)
	if !ok || vol == nil {
		res, err := f.Take(ctx, takes)
		return res, nil, err
	}
	// vr is written by the call (on this goroutine: wait runs every call
	// on its caller's); it is read only when the store answered.
	var vr *guard.VolumeResult
	res, stored, err := f.take(ctx, f.node(""), takes, false, false, func(ctx context.Context) ([]limit.Result, error) {
		r, v, err := sc.TakeSend(ctx, takes, vol)
		vr = v
		return r, err
	})
	if err != nil || !stored {
		return res, nil, err
	}
	return res, vr, nil
}

// take makes one store call (fn) for takes, on node n, and decides them
// from memory when the store cannot answer. stored says the store
// answered. side says none of takes is of the call's own subject (see
// takeByNode): its closed takes are then decided by the split limit
// instead of failing the call. abandons says fn returns as soon as its
// context is cancelled (Abandoner). A nil fn is f.counter.Take(ctx, takes):
// no closure made for it on every check.
func (f *Fallback) take(ctx context.Context, n *node, takes []limit.Take, side, abandons bool, fn func(ctx context.Context) ([]limit.Result, error)) (_ []limit.Result, stored bool, _ error) {
	// got is written by the call (on this goroutine: wait runs every call
	// on its caller's); it is read only when the store answered (err == nil).
	var got []limit.Result
	err := f.callAs(ctx, n, abandons, func(ctx context.Context) error {
		var r []limit.Result
		var err error
		if fn == nil {
			r, err = f.counter.Take(ctx, takes)
		} else {
			r, err = fn(ctx)
		}
		if err == nil && len(r) != len(takes) {
			err = fmt.Errorf("resilience: store answered %d results for %d takes", len(r), len(takes))
		}
		got = r
		return err
	})
	var res []limit.Result
	if err == nil {
		f.note(takes, false)
		return got, true, nil
	}
	if errors.Is(err, problem.ErrOverloaded) {
		return nil, false, err // shed: never decided from memory, and no outage
	}
	f.note(takes, true)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil, false, err
	}
	for _, t := range takes {
		if mode(t) == limit.FallbackClosed && !side {
			return nil, false, err
		}
	}
	now := f.now()
	res = make([]limit.Result, len(takes))
	for i, t := range takes {
		lim, rate := f.localLimit(t)
		res[i] = f.local.take(t, lim, rate, now)
		if side {
			f.sharedFell(n, ruleOf(t.Key))
		}
	}
	return res, false, nil
}

// Refund gives back to memory what the fallback decided, and to the store
// what the store did.
func (f *Fallback) Refund(ctx context.Context, takes []limit.Take) error {
	var shared []limit.Take
	now := f.now()
	for _, t := range takes {
		if t.Fallback {
			lim, rate := f.localLimit(t)
			f.local.refund(t, lim, rate, now)
		} else {
			shared = append(shared, t)
		}
	}
	if len(shared) == 0 {
		return nil
	}
	var errs []error
	for _, g := range f.refundGroups(shared) {
		part := pick(shared, g.idx)
		errs = append(errs, f.call(ctx, g.n, func(ctx context.Context) error { return f.counter.Refund(ctx, part) }))
	}
	return errors.Join(errs...)
}

func mode(t limit.Take) limit.FallbackMode {
	if t.OnStoreError == "" {
		return limit.FallbackClosed
	}
	return t.OnStoreError
}

// localLimit is what t may spend on this instance: LocalLimit (local) or
// the split limit (open), with a bucket's refill scaled alike, so that an
// empty bucket takes as long to refill as the shared one.
func (f *Fallback) localLimit(t limit.Take) (lim int64, rate float64) {
	switch mode(t) {
	case limit.FallbackLocal:
		lim = max(1, t.LocalLimit)
	default:
		lim = max(1, t.Limit/int64(f.Instances()))
	}
	if t.Algorithm == limit.TokenBucket && t.Limit > 0 {
		rate = t.Rate * float64(lim) / float64(t.Limit)
	}
	return lim, rate
}

// Instances is the live instance count the split limit divides by.
func (f *Fallback) Instances() int { return max(1, f.instances()) }
