package resilience

import (
	"context"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
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
	// ProbeEvery+ProbeTimeout old. Defaults 50ms and 100ms. Without probe
	// reports, a call past Timeout is a store failure.
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
//
// Fallback is the face the rest of otpguard sees; the work is done by the
// parts below, each in the file of its concept.
type Fallback struct {
	decide   *decider     // takes and refunds (decide.go, nodetake.go, trust.go)
	calls    *calls       // each store call, within the timeout (breaker.go, probe.go, inline.go)
	nodes    *nodes       // the nodes, each with its breaker (nodes.go)
	memory   *memory      // the in-memory limits (memory.go)
	shared   *sharedRules // shared keys decided from memory (shared.go)
	policies *policies    // each policy's state (status.go)
	codes    guard.Codes
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
	pol := newPolicies(o.Policies, o.Logger, o.Now)
	ns := newNodes(o.NodeOf, o.Breaker, o.Logger, pol.leave)
	cs := &calls{nodes: ns, timeout: o.Timeout, ceiling: o.Ceiling, fresh: o.ProbeEvery + o.ProbeTimeout,
		probeTO: o.ProbeTimeout, warm: o.Warm, now: o.Now}
	mem := &memory{limits: newMemoryLimits(o.MemoryKeys), instances: o.Instances}
	sh := &sharedRules{memory: mem, log: o.Logger, now: o.Now}
	d := &decider{counter: o.Counter, calls: cs, nodes: ns, memory: mem, shared: sh, policies: pol,
		log: o.Logger, now: o.Now}
	d.abandoner, _ = o.Counter.(Abandoner)
	return &Fallback{decide: d, calls: cs, nodes: ns, memory: mem, shared: sh, policies: pol, codes: o.Codes}
}

var _ guard.SendCounter = (*Fallback)(nil)

// Take asks the store; when it cannot answer, it decides every take from
// memory by its policy's mode, or fails the whole call if any take's mode
// is closed. On Redis Cluster the takes are decided per node.
func (f *Fallback) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	return f.decide.takeAll(ctx, takes)
}

// TakeSend takes a send's limits and vol in one store call when the store
// is a SendCounter (otherwise vol is not taken: nil VolumeResult). When
// the store cannot answer, the takes are decided as Take decides them and
// vol is not taken.
func (f *Fallback) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	return f.decide.takeSend(ctx, takes, vol)
}

// Refund gives back to memory what the fallback decided, and to the store
// what the store did.
func (f *Fallback) Refund(ctx context.Context, takes []limit.Take) error {
	return f.decide.refund(ctx, takes)
}

// Instances is the live instance count the split limit divides by.
func (f *Fallback) Instances() int { return f.memory.Instances() }

// Observe takes the result of a call made outside the Fallback (the
// heartbeat), so LastFailure sees an outage even with no traffic.
func (f *Fallback) Observe(err error) {
	if err != nil {
		f.calls.failed()
	}
}

// LastFailure is when a store call last failed (zero: never).
func (f *Fallback) LastFailure() time.Time { return f.calls.lastFailed() }

// Late is how many calls a healthy Redis answered past the timeout: each
// would have been a fallback decision (or a refusal) without the probe. A
// rising count says this host is saturated.
func (f *Fallback) Late() int64 { return f.calls.late.Load() }

// Shed is how many calls were given up on while Redis was healthy.
func (f *Fallback) Shed() int64 { return f.calls.shed.Load() }

// ObserveProbe takes one result of the probe, a ping on a warm connection
// of its own (store.Probe). A success vouches for Redis: calls past the
// timeout are waited for instead of failing; so does a ping that timed out
// while calls got their replies since the last verdict (healthy). Results
// count in the breaker like calls, so a dead Redis opens it with no
// traffic; and while the breaker is half-open the probe alone tries Redis,
// through Warm, so no decision meets a cold pool.
func (f *Fallback) ObserveProbe(ctx context.Context, err error) {
	f.calls.observeProbe(ctx, "", err)
}

// Probe runs ping, the probe's ping on a connection of its own, and
// tells the Fallback as ObserveProbe does, patiently: a ping past the
// probe's timeout is a late verdict then, and its answer, if it comes
// within ProbePatience, vouches for Redis after all (probe.go).
func (f *Fallback) Probe(ctx context.Context, ping func(context.Context) error) {
	f.calls.probe(ctx, "", ping)
}

// ProbeNode is Probe for one node of a Redis Cluster (ObserveNodeProbe).
func (f *Fallback) ProbeNode(ctx context.Context, name string, ping func(context.Context) error) {
	f.calls.probe(ctx, name, ping)
}

// ObserveNodeProbe is ObserveProbe for one node of a Redis Cluster (its
// master's address, as FallbackOptions.NodeOf names it). Warm is run
// only for the one node of a single Redis or Sentinel ("").
func (f *Fallback) ObserveNodeProbe(ctx context.Context, name string, err error) {
	f.calls.observeProbe(ctx, name, err)
}

// Do makes a call that decides nothing (the conversion watch, the block
// index) through the breaker and the timeout: while the breaker is open it
// fails at once with ErrStoreUnavailable and touches no connection, so an
// outage costs such callers microseconds, not a timeout each.
//
// On Redis Cluster a Do touches keys of its own choosing: it goes through
// a breaker of its own (node "*"), opened by its calls' failures and
// tried again by them, never by the probe. DoFor, for work on one
// subject's keys, follows the slot map instead.
func (f *Fallback) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if f.nodes.multi() {
		return f.calls.call(ctx, f.nodes.get("*"), fn)
	}
	return f.calls.call(ctx, f.nodes.get(""), fn)
}

// DoFor is Do for a call on the keys of one subject (k's hash tag): it
// goes through the breaker of the node that holds k.
func (f *Fallback) DoFor(ctx context.Context, k limit.Key, fn func(ctx context.Context) error) error {
	return f.calls.call(ctx, f.nodes.of(k), fn)
}

// NodeOf names the node that holds k: its master's address on Redis
// Cluster, "" on a single Redis or Sentinel (one node). Callers that touch
// keys of several subjects group them by it and make one DoFor per node.
func (f *Fallback) NodeOf(k limit.Key) string { return f.nodes.name(k) }

// ForgetNodes drops the named nodes that are not in live (the masters of
// the current slot map), so that a dead master replaced by its replica
// no longer counts in Status. A key still mapped to a forgotten node (a
// client whose map is not reloaded yet) makes it again, breaker closed.
func (f *Fallback) ForgetNodes(live []string) { f.nodes.forget(live) }

// SharedFallbacks is, per rule ("otp:ip:sends", "otp:vel:h", ...), how
// many of its decisions were taken from memory because its key's master
// did not answer while the request's own keys' did (Redis Cluster).
func (f *Fallback) SharedFallbacks() map[string]int64 { return f.shared.counted() }

// AddPolicies makes the limit policies of limits known that are not yet
// (Envoy's rules, a reload's new names), so that Status lists them, and
// their count of fallback decisions starts at zero, before their first
// decision rather than at it.
func (f *Fallback) AddPolicies(limits map[string]limit.Policy) { f.policies.add(limits) }

// Status reports the breaker and the policies, sorted by name.
func (f *Fallback) Status() FallbackStatus {
	s := FallbackStatus{Instances: f.Instances(), LastFailure: f.LastFailure(), MemoryKeys: f.memory.limits.len()}
	s.Breaker, s.Nodes = f.nodes.status()
	s.Policies = f.policies.list()
	return s
}
