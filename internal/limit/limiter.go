// Package limit is otpguard's limiter: the policies of /limits/check and
// of the Envoy rules, their algorithms (token bucket, fixed window), the
// decisions, and the counter model the OTP rules (package guard) count
// with too. It reaches the shared store through Counter, implemented by
// package store and wrapped by package resilience, and refuses with
// package problem's errors. It knows nothing of HTTP, gRPC, Redis or OTP.
package limit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// Bounds on /limits/check input.
const (
	// MaxBatch is the most checks one request may carry.
	MaxBatch = 20
	// MaxKeyLength bounds a caller's key.
	MaxKeyLength = 128
)

// Check asks whether Cost may be spent from policy Policy for Key.
type Check struct {
	Policy string
	Key    string
	Cost   int64
	// Override puts Limit in place of the policy's limit for this check
	// alone: an Envoy descriptor's own limit (docs/envoy.md). Only a
	// fixed window's limit can be overridden; its window, fallback and
	// counter's name stay the policy's.
	Override bool
	Limit    int64
}

// Decision is the answer to one Check.
type Decision struct {
	Policy     string
	Key        string
	Allowed    bool // what the caller must do: true for a shadow policy
	WouldAllow bool // what the policy decided, shadow or not
	Shadow     bool
	// Mode says how it was decided: exact (in Redis), sync (this
	// instance's hot-key counters), fallback (Result.Fallback: the store
	// could not answer) or memory (a remembered denial, Denials).
	Mode       Mode
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// Batch is the answer to one request: Allowed only if every check allows.
type Batch struct {
	Allowed   bool
	Decisions []Decision
}

// Denying returns the decision that denies the batch, or the first one: the
// one whose figures go into the RateLimit headers.
func (b Batch) Denying() Decision {
	for _, d := range b.Decisions {
		if !d.Allowed {
			return d
		}
	}
	return b.Decisions[0]
}

// Limiter answers /limits/check from named policies.
type Limiter struct {
	policies map[string]limitPolicy
	counter  Counter
	log      *slog.Logger
	hot      HotKeys  // decides sync-mode policies; nil: every check is exact
	denials  *Denials // repeats exact denials until they expire; nil: none
}

// HotKeys decides sync-mode checks from this instance's local counters
// (resilience.HotKeys). Decide answers ok false when the check must be
// decided exactly, through the Counter; Refund gives back what Decide spent.
type HotKeys interface {
	Decide(t Take, interval time.Duration) (res Result, ok bool)
	Refund(t Take)
}

// WithHotKeys lets sync-mode policies be decided by h.
func (l *Limiter) WithHotKeys(h HotKeys) *Limiter {
	l.hot = h
	return l
}

// WithDenials lets d answer checks that an exact denial still covers, with
// no round trip (Denials; their decisions say mode memory).
func (l *Limiter) WithDenials(d *Denials) *Limiter {
	l.denials = d
	return l
}

// take decides sync-mode checks locally, answers checks a remembered
// denial covers from memory, and sends the others to the store in one
// round trip; modes[i] says which were decided here (ModeSync, ModeMemory;
// "" for the store). A sync-mode check the hot keys hand back (their last
// sync failed, the table is full, or the cost is more than this
// instance's share) goes with the others, through the counter: a store
// that cannot answer is then met by the policy's own on_store_error, as
// for an exact check, and never by a stale local share. When a check
// decided here denies the batch, the store's takes are held: decided, so
// that every check has its answer, but spending nothing.
//
// It writes the results and modes into w.
func (l *Limiter) take(ctx context.Context, w *checkWork) error {
	takes, pols, res, modes := w.takes, w.pols, w.res, w.modes
	denied := false // by a check decided here: the store must spend nothing
	locals := 0
	for i, t := range takes {
		local := false
		switch {
		case l.hot != nil && pols[i].Mode == ModeSync:
			if res[i], local = l.hot.Decide(t, pols[i].SyncInterval); local {
				modes[i] = ModeSync
			}
		case l.denials != nil:
			if res[i], local = l.denials.lookup(t); local {
				modes[i] = ModeMemory
			}
		}
		if local {
			locals++
			denied = denied || (!res[i].Allowed && !pols[i].Shadow)
		}
	}
	if locals == len(takes) {
		return nil
	}
	// The takes for the store, and where each came from (at[j]); when none
	// was decided here, takes themselves, in order (at nil), which
	// allocates nothing on the hot path.
	exact, at := takes, []int(nil)
	if locals > 0 {
		exact, at = make([]Take, 0, len(takes)-locals), make([]int, 0, len(takes)-locals)
		for i, t := range takes {
			if modes[i] == "" {
				exact, at = append(exact, t), append(at, i)
			}
		}
	}
	for j := range exact {
		exact[j].Hold = denied && exact[j].AllOrNothing // an Independent check spends whatever the others say
	}
	var sent time.Time
	if l.denials != nil {
		sent = l.denials.now()
	}
	got, err := l.counter.Take(ctx, exact)
	if err == nil && len(got) != len(exact) {
		err = fmt.Errorf("limits: store answered %d results for %d takes", len(got), len(exact))
	}
	if l.denials != nil {
		l.denials.learn(exact, got, err, sent, at, pols)
	}
	if err != nil {
		for i := range takes { // the batch is refused: give back what was spent here
			if modes[i] == ModeSync && res[i].Spent {
				l.hot.Refund(takes[i])
			}
		}
		return err
	}
	for j := range exact {
		i := j
		if at != nil {
			i = at[j]
		}
		res[i] = got[j]
	}
	return nil
}

// limitPolicy is a policy with the names its takes carry (PolicyKey's
// space, PolicyName), made once rather than per check.
type limitPolicy struct {
	Policy
	space, name string
}

// New returns a Limiter over validated policies.
func New(policies map[string]Policy, counter Counter, log *slog.Logger) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pols := make(map[string]limitPolicy, len(policies))
	for name, p := range policies {
		pols[name] = limitPolicy{Policy: p, space: PolicyKey(name, "").Space, name: PolicyName(name)}
	}
	return &Limiter{policies: pols, counter: counter, log: log}
}

// Policy returns the named policy.
func (l *Limiter) Policy(name string) (Policy, bool) {
	p, ok := l.policies[name]
	return p.Policy, ok
}

// Check decides a batch in one round trip to the store. A batch spends all
// or nothing: a denied check writes nothing (SpendIfAllowed), the checks
// of one hash slot are decided in one atomic step that spends nothing when
// one denies (Take.AllOrNothing), and what a batch spanning Redis Cluster
// slots (or this instance's hot-key counters) spent is refunded when
// another check denies (a second round trip, only then), so a denied
// request costs the caller nothing.
func (l *Limiter) Check(ctx context.Context, checks []Check) (Batch, error) {
	switch {
	case len(checks) == 0:
		return Batch{}, problem.Errorf(problem.CodeInvalidRequest, "no checks given")
	case len(checks) > MaxBatch:
		return Batch{}, problem.Errorf(problem.CodeInvalidRequest, "at most %d checks per request, got %d", MaxBatch, len(checks))
	}
	w := newCheckWork(len(checks))
	if err := l.takes(checks, w); err != nil {
		return Batch{}, err
	}
	ctx = withDecisionIn(ctx, &w.ctx) // a dead store costs one timeout per request
	if err := l.take(ctx, w); err != nil {
		l.log.Log(ctx, StoreFailureLevel(err), "limit store failed", "err", err)
		return Batch{}, StoreError(err)
	}
	takes, pols, res, modes := w.takes, w.pols, w.res, w.modes

	b := Batch{Allowed: true, Decisions: w.decisions}
	for i, r := range res {
		shadow := pols[i].Shadow
		b.Decisions[i] = Decision{
			Policy: checks[i].Policy, Key: checks[i].Key,
			Allowed: r.Allowed || shadow, WouldAllow: r.Allowed, Shadow: shadow,
			Limit: r.Limit, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter,
			Mode: ModeExact,
		}
		switch {
		case modes[i] != "":
			b.Decisions[i].Mode = modes[i]
		case r.Fallback:
			b.Decisions[i].Mode = ModeFallback
		}
		if !r.Allowed && !shadow {
			b.Allowed = false
		}
		if !r.Allowed && shadow {
			l.log.InfoContext(ctx, "shadow policy would deny", "policy", checks[i].Policy)
		}
	}

	var refunds []Take
	for i, r := range res {
		if r.Spent && (!b.Allowed || !r.Allowed) && takes[i].AllOrNothing {
			if modes[i] == ModeSync {
				l.hot.Refund(takes[i])
				continue
			}
			t := takes[i]
			t.Fallback = r.Fallback // refunded where it was counted
			refunds = append(refunds, t)
		}
	}
	if len(refunds) > 0 {
		if err := l.counter.Refund(context.WithoutCancel(ctx), refunds); err != nil {
			// A lost refund only ever refuses more, never allows more.
			l.log.WarnContext(ctx, "refund failed", "err", err)
		}
	}
	return b, nil
}

// checkWork is what one Check works in: its takes and their policies,
// the results, where each was decided, the decisions answered and the
// decision's context. A batch of one, the common case, has it all in one
// allocation.
type checkWork struct {
	takes     []Take
	pols      []checkPolicy
	res       []Result
	modes     []Mode
	decisions []Decision // handed to the caller in the Batch
	ctx       decisionCtx

	one struct { // the slices' memory for a batch of one
		take     [1]Take
		pol      [1]checkPolicy
		res      [1]Result
		mode     [1]Mode
		decision [1]Decision
	}
}

// checkPolicy is what a decision reads of its check's policy besides the
// Take, rather than a copy of the whole Policy per check.
type checkPolicy struct {
	Mode         Mode
	SyncInterval time.Duration
	Shadow       bool
}

func newCheckWork(n int) *checkWork {
	w := new(checkWork)
	if n == 1 {
		w.takes, w.pols, w.res, w.modes, w.decisions = w.one.take[:], w.one.pol[:], w.one.res[:], w.one.mode[:], w.one.decision[:]
		return w
	}
	w.takes, w.pols, w.res, w.modes, w.decisions = make([]Take, n), make([]checkPolicy, n), make([]Result, n), make([]Mode, n), make([]Decision, n)
	return w
}

// takes fills w's takes and policies from checks (1 to MaxBatch).
func (l *Limiter) takes(checks []Check, w *checkWork) error {
	for i, c := range checks {
		if c.Policy == "" {
			return problem.Errorf(problem.CodeInvalidRequest, "checks[%d].policy is required", i)
		}
		lp, ok := l.policies[c.Policy]
		p := lp.Policy
		if !ok {
			return problem.Errorf(problem.CodeUnknownPolicy, "checks[%d]: no policy named %q", i, c.Policy)
		}
		if err := ValidateKey(c.Key); err != nil {
			return problem.Errorf(problem.CodeInvalidKey, "checks[%d].key: %s", i, err.(*problem.Error).Message)
		}
		if c.Override {
			if p.Algorithm != FixedWindow || c.Limit < 0 || c.Limit > MaxValue {
				return problem.Errorf(problem.CodeInvalidRequest, "checks[%d]: a limit of %d cannot override policy %q", i, c.Limit, c.Policy)
			}
			p.Limit = c.Limit
		}
		if c.Cost < 0 || (c.Cost > p.Max() && !p.Independent) || c.Cost > MaxValue {
			return problem.Errorf(problem.CodeInvalidCost, "checks[%d].cost must be between 0 and %d for policy %q, got %d", i, p.Max(), c.Policy, c.Cost)
		}
		w.takes[i] = p.take(c, lp.space, lp.name)
		w.pols[i] = checkPolicy{Mode: p.Mode, SyncInterval: p.SyncInterval, Shadow: p.Shadow}
	}
	return nil
}

// PolicyKey is the counter of a /limits/check policy for a caller's key:
// space "l:" + policy and no name, since the policy implies its algorithm
// (the store renders it og:l:api{user:42}, docs/scaling.md).
func PolicyKey(policy, key string) Key { return Key{Space: "l:" + policy, ID: key} }

// ValidateKey accepts caller keys of 1 to MaxKeyLength characters from
// letters, digits and _ . : @ / + = -. Braces are refused: they would break
// the hash tag that keeps a subject in one Redis Cluster slot.
func ValidateKey(k string) error {
	if k == "" {
		return problem.Errorf(problem.CodeInvalidKey, "must not be empty")
	}
	if len(k) > MaxKeyLength {
		return problem.Errorf(problem.CodeInvalidKey, "must be at most %d characters, got %d", MaxKeyLength, len(k))
	}
	// By rune, not byte: a refused 'к' is named 'к', not the 'Ð' of its
	// first byte, at its position in characters.
	pos := 0
	for _, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_' || c == '.' || c == ':' || c == '@' || c == '/' || c == '+' || c == '=' || c == '-':
		default:
			return problem.Errorf(problem.CodeInvalidKey, "character %q at %d is not allowed (use ASCII letters, digits and _.:@/+=-)", c, pos)
		}
		pos++
	}
	return nil
}
