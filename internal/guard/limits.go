package guard

import (
	"context"
	"fmt"
	"log/slog"
	"time"
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
}

// Decision is the answer to one Check.
type Decision struct {
	Policy     string
	Key        string
	Allowed    bool // what the caller must do: true for a shadow policy
	WouldAllow bool // what the policy decided, shadow or not
	Shadow     bool
	Mode       Mode // sync when decided by this instance's hot-key counters
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
	policies map[string]LimitPolicy
	counter  Counter
	log      *slog.Logger
	hot      *HotKeys // decides sync-mode policies; nil: every check is exact
}

// WithHotKeys lets sync-mode policies be decided by h.
func (l *Limiter) WithHotKeys(h *HotKeys) *Limiter {
	l.hot = h
	return l
}

// take decides sync-mode checks locally and sends the others to the store
// in one round trip; local[i] says which were local. A sync-mode check the
// hot keys hand back (their last sync failed, the table is full, or the
// cost is more than this instance's share) goes with the others, through
// the counter: a store that cannot answer is then met by the policy's own
// on_store_error, as for an exact check, and never by a stale local share.
func (l *Limiter) take(ctx context.Context, takes []Take, pols []LimitPolicy) ([]Result, []bool, error) {
	res := make([]Result, len(takes))
	local := make([]bool, len(takes))
	var exact []Take
	var at []int
	for i, t := range takes {
		if l.hot != nil && pols[i].Mode == ModeSync {
			if res[i], local[i] = l.hot.Decide(t, pols[i].SyncInterval); local[i] {
				continue
			}
		}
		exact = append(exact, t)
		at = append(at, i)
	}
	if len(exact) == 0 {
		return res, local, nil
	}
	got, err := l.counter.Take(ctx, exact)
	if err == nil && len(got) != len(exact) {
		err = fmt.Errorf("limits: store answered %d results for %d takes", len(got), len(exact))
	}
	if err != nil {
		for i := range takes { // the batch is refused: give back what was spent here
			if local[i] && res[i].Spent {
				l.hot.Refund(takes[i])
			}
		}
		return nil, nil, err
	}
	for j, i := range at {
		res[i] = got[j]
	}
	return res, local, nil
}

// NewLimiter returns a Limiter over validated policies.
func NewLimiter(policies map[string]LimitPolicy, counter Counter, log *slog.Logger) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{policies: policies, counter: counter, log: log}
}

// Policy returns the named policy.
func (l *Limiter) Policy(name string) (LimitPolicy, bool) {
	p, ok := l.policies[name]
	return p, ok
}

// Check decides a batch in one round trip to the store. A batch spends all
// or nothing: a denied check writes nothing (SpendIfAllowed), and when a
// check denies, what the others of its batch spent is refunded (a second
// round trip, only for a batch that is partly allowed), so a denied
// request costs the caller nothing.
func (l *Limiter) Check(ctx context.Context, checks []Check) (Batch, error) {
	takes, pols, err := l.takes(checks)
	if err != nil {
		return Batch{}, err
	}
	ctx = withDecision(ctx) // a dead store costs one timeout per request
	res, local, err := l.take(ctx, takes, pols)
	if err != nil {
		l.log.Log(ctx, StoreFailureLevel(err), "limit store failed", "err", err)
		return Batch{}, storeError(err)
	}

	b := Batch{Allowed: true, Decisions: make([]Decision, len(checks))}
	for i, r := range res {
		shadow := pols[i].Shadow
		b.Decisions[i] = Decision{
			Policy: checks[i].Policy, Key: checks[i].Key,
			Allowed: r.Allowed || shadow, WouldAllow: r.Allowed, Shadow: shadow,
			Limit: r.Limit, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter,
			Mode: ModeExact,
		}
		if local[i] {
			b.Decisions[i].Mode = ModeSync
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
		if r.Spent && (!b.Allowed || !r.Allowed) {
			if local[i] {
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

func (l *Limiter) takes(checks []Check) ([]Take, []LimitPolicy, error) {
	switch {
	case len(checks) == 0:
		return nil, nil, Errorf(CodeInvalidRequest, "no checks given")
	case len(checks) > MaxBatch:
		return nil, nil, Errorf(CodeInvalidRequest, "at most %d checks per request, got %d", MaxBatch, len(checks))
	}
	takes := make([]Take, len(checks))
	pols := make([]LimitPolicy, len(checks))
	for i, c := range checks {
		if c.Policy == "" {
			return nil, nil, Errorf(CodeInvalidRequest, "checks[%d].policy is required", i)
		}
		p, ok := l.policies[c.Policy]
		if !ok {
			return nil, nil, Errorf(CodeUnknownPolicy, "checks[%d]: no policy named %q", i, c.Policy)
		}
		if err := ValidateKey(c.Key); err != nil {
			return nil, nil, Errorf(CodeInvalidKey, "checks[%d].key: %s", i, err.(*Error).Message)
		}
		if c.Cost < 0 || c.Cost > p.Max() {
			return nil, nil, Errorf(CodeInvalidCost, "checks[%d].cost must be between 0 and %d for policy %q, got %d", i, p.Max(), c.Policy, c.Cost)
		}
		takes[i] = takeFor(c, p)
		pols[i] = p
	}
	return takes, pols, nil
}

// takeFor is the Take of one check. When the store cannot answer, the
// Fallback decides it by the policy's on_store_error (a batch holding a
// closed policy is refused whole).
func takeFor(c Check, p LimitPolicy) Take {
	t := Take{Key: Key{Space: "lim:" + c.Policy, ID: c.Key}, Algorithm: p.Algorithm, Cost: c.Cost,
		Policy: LimitPolicyName(c.Policy), OnStoreError: p.OnStoreError, LocalLimit: p.LocalLimit}
	switch p.Algorithm {
	case TokenBucket:
		t.Key.Name, t.Limit, t.Rate = "tb", p.Capacity, p.RefillPerSecond
	default:
		t.Key.Name, t.Limit, t.Window, t.SpendIfAllowed = "fw", p.Limit, p.Window, true
	}
	return t
}

// ValidateKey accepts caller keys of 1 to MaxKeyLength characters from
// letters, digits and _ . : @ / + = -. Braces are refused: they would break
// the hash tag that keeps a subject in one Redis Cluster slot.
func ValidateKey(k string) error {
	if k == "" {
		return Errorf(CodeInvalidKey, "must not be empty")
	}
	if len(k) > MaxKeyLength {
		return Errorf(CodeInvalidKey, "must be at most %d characters, got %d", MaxKeyLength, len(k))
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_' || c == '.' || c == ':' || c == '@' || c == '/' || c == '+' || c == '=' || c == '-':
		default:
			return Errorf(CodeInvalidKey, "character %q at %d is not allowed (use letters, digits and _.:@/+=-)", c, i)
		}
	}
	return nil
}
