package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrStoreUnavailable is the cause of a store call the Fallback did not make: the
// breaker is open, or the store already failed within the same decision.
var ErrStoreUnavailable = errors.New("the shared store is unavailable")

// BreakerOptions tune when the Fallback stops waiting on the store. The
// zero value means the defaults in the README ("When Redis is down").
type BreakerOptions struct {
	// Failures in a row that open the breaker (default 5).
	Failures int
	// Or: at least MinRequests calls in Window of which at least
	// FailureRatio failed (defaults 20 and 0.5): a flapping store opens it
	// too, one slow call never does.
	MinRequests  int
	FailureRatio float64
	Window       time.Duration // rolling, in one-second buckets (default 10s)
	// OpenFor is how long the breaker stays open before one probe call may
	// go to the store again (default 1s). The probe's success closes it.
	OpenFor time.Duration
}

func (b BreakerOptions) withDefaults() BreakerOptions {
	if b.Failures <= 0 {
		b.Failures = 5
	}
	if b.MinRequests <= 0 {
		b.MinRequests = 20
	}
	if b.FailureRatio <= 0 || b.FailureRatio > 1 {
		b.FailureRatio = 0.5
	}
	if b.Window <= 0 {
		b.Window = 10 * time.Second
	}
	if b.OpenFor <= 0 {
		b.OpenFor = time.Second
	}
	return b
}

// FallbackOptions are the dependencies and settings of a Fallback.
type FallbackOptions struct {
	Counter Counter
	Codes   Codes // may be nil when only the Counter is used
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
	// MemoryKeys bounds the in-memory limiter (DefaultMemoryKeys when 0).
	MemoryKeys int
	// Policies, when given, are listed by Status before their first decision.
	Policies *Policies
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
	counter   Counter
	codes     Codes
	timeout   time.Duration
	ceiling   time.Duration
	fresh     time.Duration // one probe round, ProbeEvery + ProbeTimeout
	probeTO   time.Duration
	warm      func(ctx context.Context) error
	instances func() int
	breaker   *gobreaker.TwoStepCircuitBreaker[struct{}]
	local     *memoryLimits
	log       *slog.Logger
	now       func() time.Time
	workers   *workers // run the calls wait waits for (workers.go)

	lastFailure atomic.Int64 // unix nanoseconds of the last failed store call
	probeSeen   atomic.Bool
	// callOK is when a store call last got its reply (unix nanoseconds).
	// vouch is the probe's last verdict and verdictAt when it was given
	// (healthy).
	callOK    atomic.Int64
	vouch     atomic.Bool
	verdictAt atomic.Int64
	// lateRounds counts the probe's timed-out pings in a row with no call
	// answered meanwhile.
	lateRounds atomic.Int32
	shed       atomic.Int64 // calls given up on while Redis was healthy
	late       atomic.Int64 // calls answered past the timeout by a healthy Redis

	mu       sync.RWMutex
	policies map[string]*policyState
}

type policyState struct {
	mode       FallbackMode
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
		policies: map[string]*policyState{}, workers: newWorkers(10 * time.Second),
	}
	if o.Policies != nil {
		f.policies[OTPPolicyName] = &policyState{mode: o.Policies.OTP.OnStoreError}
		for name, p := range o.Policies.Limits {
			f.policies[LimitPolicyName(name)] = &policyState{mode: p.OnStoreError}
		}
	}
	b := o.Breaker.withDefaults()
	f.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         "redis",
		MaxRequests:  1,
		Interval:     b.Window,
		BucketPeriod: time.Second,
		Timeout:      b.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(b.Failures) ||
				(c.Requests >= uint32(b.MinRequests) && float64(c.TotalFailures) >= b.FailureRatio*float64(c.Requests))
		},
		// Called under the breaker's lock, once per change: log, nothing more.
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch to {
			// One WARN line per outage: a failed probe (half-open back to
			// open) and the probing are the same outage going on.
			case gobreaker.StateOpen:
				level := slog.LevelWarn
				if from == gobreaker.StateHalfOpen {
					level = slog.LevelDebug
				}
				f.log.Log(context.Background(), level, "redis breaker open: decisions go to the fallback without waiting on Redis",
					"from", from.String(), "probe_in", b.OpenFor.String())
			case gobreaker.StateHalfOpen:
				f.log.Debug("redis breaker half-open: probing Redis")
			case gobreaker.StateClosed:
				f.log.Info("redis breaker closed: Redis answers again, limits are shared and exact")
				f.leaveFallback()
			}
		},
		IsSuccessful: func(err error) bool { return err == nil || errors.Is(err, ErrNotFound) },
		// A caller that went away, or a call given up on while Redis was
		// healthy, says nothing about Redis.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) || errors.Is(err, ErrOverloaded) },
	})
	return f
}

// OTPPolicyName is the name the OTP policy goes by in Take.Policy and in
// Status.
const OTPPolicyName = "otp"

// LimitPolicyName is the name a limit policy goes by in Take.Policy and in
// Status: "limits." and its name, as in the policy file.
func LimitPolicyName(name string) string { return "limits." + name }

// decision marks a context as one decision (a request): once the store has
// failed within it, the rest of the decision does not wait on the store
// again, so a decision waits at most one timeout on a dead store.
type decision struct{ failed atomic.Bool }

type decisionKey struct{}

func withDecision(ctx context.Context) context.Context {
	if _, ok := ctx.Value(decisionKey{}).(*decision); ok {
		return ctx
	}
	return context.WithValue(ctx, decisionKey{}, &decision{})
}

// call makes one store call through the breaker. It waits for the store
// as long as Redis is known to be healthy (wait), and fails at once while
// the breaker is not closed: then only the probe tries Redis (without a
// probe, one call is let through as the breaker's half-open trial).
func (f *Fallback) call(ctx context.Context, fn func(ctx context.Context) error) error {
	d, _ := ctx.Value(decisionKey{}).(*decision)
	if d != nil && d.failed.Load() {
		return fmt.Errorf("guard: store failed earlier in this decision: %w", ErrStoreUnavailable)
	}
	if st := f.breaker.State(); st != gobreaker.StateClosed && f.probing() {
		// Only the probe tries Redis while the breaker is not closed.
		f.failed()
		return fmt.Errorf("guard: redis breaker %s: %w", st, ErrStoreUnavailable)
	}
	done, err := f.breaker.Allow()
	if err != nil {
		f.failed()
		return fmt.Errorf("guard: redis breaker %s: %w (%w)", f.breaker.State(), ErrStoreUnavailable, err)
	}
	err = f.wait(ctx, fn)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up: that says nothing about the store.
		err = errors.Join(err, ctx.Err())
		done(err)
		return err
	}
	done(err)
	if err == nil || errors.Is(err, ErrNotFound) {
		f.callOK.Store(time.Now().UnixNano())
	}
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrOverloaded) {
		if d != nil {
			d.failed.Store(true)
		}
		f.failed()
	}
	return err
}

// wait runs fn and waits for it: up to the timeout, and past it for as
// long as the probe vouches for Redis (up to the ceiling), because a reply
// that is late only because this host is saturated is still exact, while a
// decision abandoned at the timeout may have counted and would be decided
// a second time by the fallback. A call outliving the ceiling on a healthy
// Redis is shed (ErrOverloaded); one outliving the timeout while Redis is
// not vouched for is a store failure (the fallback decides).
func (f *Fallback) wait(ctx context.Context, fn func(ctx context.Context) error) error {
	if f.timeout <= 0 {
		return fn(ctx)
	}
	if !f.probing() { // no probe: the timeout alone decides, as before
		cctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return fn(cctx)
	}
	cctx, cancel := context.WithTimeout(ctx, f.ceiling)
	defer cancel()
	res := make(chan error, 1)
	f.workers.run(func() { res <- fn(cctx) })
	t := time.NewTimer(f.timeout)
	defer t.Stop()
	late := false
	for {
		select {
		case err := <-res:
			if late {
				f.late.Add(1)
			}
			if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && f.healthy() {
				f.shed.Add(1)
				return fmt.Errorf("guard: no answer within %s from a healthy redis: %w (%w)", f.ceiling, ErrOverloaded, err)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if !f.healthy() {
				return fmt.Errorf("guard: no answer within %s, and the probe does not vouch for redis: %w", f.timeout, context.DeadlineExceeded)
			}
			late = true
			t.Reset(f.fresh / 2) // look again before the probe's word goes stale
		}
	}
}

// DefaultProbeEvery and DefaultProbeTimeout are how often the probe pings
// Redis and how long one ping may take.
const (
	DefaultProbeEvery   = 50 * time.Millisecond
	DefaultProbeTimeout = 100 * time.Millisecond
)

// probing reports whether a probe has ever reported.
func (f *Fallback) probing() bool { return f.probeSeen.Load() }

// healthy reports whether Redis is known to answer: the probe's last
// verdict vouches for it. The verdict is given each time the probe's ping
// ends (ObserveProbe), not aged by the wall clock: when this process is
// not scheduled for a while (a saturated host), every timer fires late at
// once, and a probe success 150 ms old says nothing against Redis; the
// next ping's outcome does. A verdict older than staleVerdicts probe
// rounds (a wedged probe) vouches for nothing.
func (f *Fallback) healthy() bool {
	at := f.verdictAt.Load()
	return f.vouch.Load() && at != 0 && time.Since(time.Unix(0, at)) <= staleVerdicts*f.fresh
}

// lateRoundsToFail is how many timed-out pings in a row, with no call
// answered meanwhile, stop the probe vouching for Redis: a black hole is
// told after about three probe rounds (~450 ms by default), while a stall
// of this process shorter than that is not taken for one.
const lateRoundsToFail = 3

// staleVerdicts bounds the age of the probe's verdict, in probe rounds
// (ProbeEvery + ProbeTimeout): 10, 1.5 s by default.
const staleVerdicts = 10

// timedOut reports whether err is a deadline or a network timeout, as
// opposed to an error from Redis or a refused connection.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &t) && t.Timeout())
}

// ObserveProbe takes one result of the probe, a ping on a warm connection
// of its own (store.Probe). A success vouches for Redis: calls past the
// timeout are waited for instead of failing; so does a ping that timed out
// while calls got their replies since the last verdict (healthy). Results count in the breaker
// like calls, so a dead Redis opens it with no traffic; and while the
// breaker is half-open the probe alone tries Redis, through Warm, so no
// decision meets a cold pool.
func (f *Fallback) ObserveProbe(ctx context.Context, err error) {
	f.probeSeen.Store(true)
	now := time.Now().UnixNano()
	prev := f.verdictAt.Swap(now)
	switch late := err != nil && timedOut(err); {
	case !late:
		f.lateRounds.Store(0)
	case f.callOK.Load() > prev:
		// The ping was late, but calls got their replies since the last
		// verdict: this host is saturated, Redis is not failing (measured:
		// with the ping alone deciding, up to 64 % of decisions fell to
		// the fallback at a load average of 30). Not a failure anywhere.
		f.lateRounds.Store(0)
		f.vouch.Store(true)
		return
	case f.vouch.Load() && f.lateRounds.Add(1) < lateRoundsToFail:
		// Late, and nothing answered: this process may simply not have
		// run (a stall of a few hundred ms on a saturated host); only
		// lateRoundsToFail such rounds in a row stop the vouching.
		return
	}
	f.vouch.Store(err == nil)
	if err != nil {
		f.failed()
	}
	switch f.breaker.State() {
	case gobreaker.StateClosed:
		if done, aerr := f.breaker.Allow(); aerr == nil {
			done(err)
		}
	case gobreaker.StateHalfOpen:
		// The probe is the half-open trial: a failed ping opens the
		// breaker again for OpenFor (so the status says open through an
		// outage), a good one warms the decision pool and closes it.
		done, aerr := f.breaker.Allow()
		if aerr != nil {
			return
		}
		if err == nil && f.warm != nil {
			wctx, cancel := context.WithTimeout(ctx, f.probeTO)
			err = f.warm(wctx)
			cancel()
		}
		done(err)
	}
}

// Do makes a call that decides nothing (the conversion watch, the block
// index) through the breaker and the timeout: while the breaker is open it
// fails at once with ErrStoreUnavailable and touches no connection, so an
// outage costs such callers microseconds, not a timeout each.
func (f *Fallback) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return f.call(ctx, fn)
}

// Late is how many calls a healthy Redis answered past the timeout: each
// would have been a fallback decision (or a refusal) without the probe. A
// rising count says this host is saturated.
func (f *Fallback) Late() int64 { return f.late.Load() }

// Shed is how many calls were given up on while Redis was healthy.
func (f *Fallback) Shed() int64 { return f.shed.Load() }

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
func (f *Fallback) Take(ctx context.Context, takes []Take) ([]Result, error) {
	res, _, err := f.take(ctx, takes, func(ctx context.Context) ([]Result, error) { return f.counter.Take(ctx, takes) })
	return res, err
}

var _ SendCounter = (*Fallback)(nil)

// TakeSend takes a send's limits and vol in one store call when the store
// is a SendCounter (otherwise vol is not taken: nil VolumeResult). When
// the store cannot answer, the takes are decided as Take decides them and
// vol is not taken.
func (f *Fallback) TakeSend(ctx context.Context, takes []Take, vol *VolumeTake) ([]Result, *VolumeResult, error) {
	sc, ok := f.counter.(SendCounter)
	if !ok || vol == nil {
		res, err := f.Take(ctx, takes)
		return res, nil, err
	}
	// vr is written by the call, which may still run after wait gave up
	// on it: it is read only when the store answered.
	var vr *VolumeResult
	res, stored, err := f.take(ctx, takes, func(ctx context.Context) ([]Result, error) {
		r, v, err := sc.TakeSend(ctx, takes, vol)
		vr = v
		return r, err
	})
	if err != nil || !stored {
		return res, nil, err
	}
	return res, vr, nil
}

// take makes one store call (fn) for takes, and decides them from memory
// when the store cannot answer. stored says the store answered.
func (f *Fallback) take(ctx context.Context, takes []Take, fn func(ctx context.Context) ([]Result, error)) (_ []Result, stored bool, _ error) {
	// got is written by the call, which may still run after wait gave up
	// on it: it is read only when the call returned (err == nil).
	var got []Result
	err := f.call(ctx, func(ctx context.Context) error {
		r, err := fn(ctx)
		if err == nil && len(r) != len(takes) {
			err = fmt.Errorf("guard: store answered %d results for %d takes", len(r), len(takes))
		}
		got = r
		return err
	})
	var res []Result
	if err == nil {
		f.note(takes, false)
		return got, true, nil
	}
	if errors.Is(err, ErrOverloaded) {
		return nil, false, err // shed: never decided from memory, and no outage
	}
	f.note(takes, true)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil, false, err
	}
	for _, t := range takes {
		if mode(t) == FallbackClosed {
			return nil, false, err
		}
	}
	now := f.now()
	res = make([]Result, len(takes))
	for i, t := range takes {
		limit, rate := f.localLimit(t)
		res[i] = f.local.take(t, limit, rate, now)
	}
	return res, false, nil
}

// Refund gives back to memory what the fallback decided, and to the store
// what the store did.
func (f *Fallback) Refund(ctx context.Context, takes []Take) error {
	var shared []Take
	now := f.now()
	for _, t := range takes {
		if t.Fallback {
			limit, rate := f.localLimit(t)
			f.local.refund(t, limit, rate, now)
		} else {
			shared = append(shared, t)
		}
	}
	if len(shared) == 0 {
		return nil
	}
	return f.call(ctx, func(ctx context.Context) error { return f.counter.Refund(ctx, shared) })
}

func mode(t Take) FallbackMode {
	if t.OnStoreError == "" {
		return FallbackClosed
	}
	return t.OnStoreError
}

// localLimit is what t may spend on this instance: LocalLimit (local) or
// the split limit (open), with a bucket's refill scaled alike, so that an
// empty bucket takes as long to refill as the shared one.
func (f *Fallback) localLimit(t Take) (limit int64, rate float64) {
	switch mode(t) {
	case FallbackLocal:
		limit = max(1, t.LocalLimit)
	default:
		limit = max(1, t.Limit/int64(f.Instances()))
	}
	if t.Algorithm == TokenBucket && t.Limit > 0 {
		rate = t.Rate * float64(limit) / float64(t.Limit)
	}
	return limit, rate
}

// Instances is the live instance count the split limit divides by.
func (f *Fallback) Instances() int { return max(1, f.instances()) }

// note records, per policy, whether its decisions go to the fallback, and
// logs each change once.
func (f *Fallback) note(takes []Take, fell bool) {
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
func (f *Fallback) anyInFallback(takes []Take) bool {
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

// The code calls below read what their call wrote only when it returned
// (err == nil): after wait gives up on a call, the call may still write.

// SaveCode saves through the breaker, within the timeout.
func (f *Fallback) SaveCode(ctx context.Context, c NewCode) (int, error) {
	var prev int
	err := f.call(ctx, func(ctx context.Context) (err error) {
		prev, err = f.codes.SaveCode(ctx, c)
		return err
	})
	if err != nil {
		return 0, err
	}
	return prev, nil
}

// GuessCode reads through the breaker, within the timeout.
func (f *Fallback) GuessCode(ctx context.Context, phone string, now time.Time) (Guess, error) {
	var g Guess
	err := f.call(ctx, func(ctx context.Context) error {
		var err error
		g, err = f.codes.GuessCode(ctx, phone, now)
		return err
	})
	if err != nil {
		return Guess{}, err
	}
	return g, nil
}

// ConsumeCode consumes through the breaker, within the timeout.
func (f *Fallback) ConsumeCode(ctx context.Context, phone string, mac []byte, now time.Time) (Consumed, error) {
	var c Consumed
	err := f.call(ctx, func(ctx context.Context) error {
		var err error
		c, err = f.codes.ConsumeCode(ctx, phone, mac, now)
		return err
	})
	if err != nil {
		return ConsumedNot, err
	}
	return c, nil
}

// DeleteCode deletes through the breaker, within the timeout.
func (f *Fallback) DeleteCode(ctx context.Context, phone string) error {
	return f.call(ctx, func(ctx context.Context) error { return f.codes.DeleteCode(ctx, phone) })
}

// LockCode marks through the breaker, within the timeout.
func (f *Fallback) LockCode(ctx context.Context, phone, id string, now time.Time) error {
	return f.call(ctx, func(ctx context.Context) error { return f.codes.LockCode(ctx, phone, id, now) })
}

// FallbackStatus is what a Fallback knows of the store: its breaker, the
// instance count it splits by, and each policy's state.
type FallbackStatus struct {
	Breaker     string // closed, half-open or open
	Instances   int
	LastFailure time.Time // zero: never
	MemoryKeys  int       // counters held by the in-memory limiter
	Policies    []PolicyStatus
}

// PolicyStatus is one policy as the Fallback last saw it.
type PolicyStatus struct {
	Policy       string // "otp" or "limits.<name>"
	OnStoreError FallbackMode
	// InFallback says its last decision was taken without the store
	// (refused, for closed), since Since.
	InFallback bool
	Since      time.Time
	Fallbacks  int64 // decisions taken without the store since start
}

// Status reports the breaker and the policies, sorted by name.
func (f *Fallback) Status() FallbackStatus {
	s := FallbackStatus{
		Breaker: f.breaker.State().String(), Instances: f.Instances(),
		LastFailure: f.LastFailure(), MemoryKeys: f.local.len(),
	}
	f.mu.RLock()
	for name, p := range f.policies {
		s.Policies = append(s.Policies, PolicyStatus{Policy: name, OnStoreError: p.mode,
			InFallback: p.inFallback, Since: p.since, Fallbacks: p.fallbacks})
	}
	f.mu.RUnlock()
	sort.Slice(s.Policies, func(i, j int) bool { return s.Policies[i].Policy < s.Policies[j].Policy })
	return s
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
