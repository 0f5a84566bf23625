package guard

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The lookup budget (riskstep.go): an hour's and a day's fixed window
// for the whole deployment, each a MULTI INCR + EXPIRE NX in the store,
// so that the lookups of every instance count together. A send whose
// refusal may ask its risk score takes its place beside its first round
// trip (lookupHold), so that the lookup waits on no round trip of its
// own; a place the send does not use goes back beside its next one.

// budgetTakes are the budget's two windows, one lookup each.
func (s *risk) budgetTakes() []limit.Take {
	hk, dk := riskBudgetKeys()
	w := func(k limit.Key, n int64, d time.Duration) limit.Take {
		return limit.Take{Key: k, Algorithm: limit.FixedWindow, Limit: n, Window: d, Cost: 1,
			Policy: OTPPolicyName, OnStoreError: limit.FallbackClosed}
	}
	return []limit.Take{w(hk, s.policy.PerHour, time.Hour), w(dk, s.policy.PerDay, 24*time.Hour)}
}

// countBudget takes one lookup from the hour's and the day's windows, all
// instances together. ok: both windows let it through in the store; a
// window that refuses, a store that fails or a fallback's answer (the
// counter could not count it in the store: a dead Cluster master) mean
// no lookup. counted is what the store (or the fallback) counted, each
// in its window, to give back when no lookup is made; hour is the hour's
// take as counted, for earnBack.
func (s *risk) countBudget(ctx context.Context) (hour limit.Take, counted []limit.Take, ok bool) {
	takes := s.budgetTakes()
	res, err := s.counter.Take(ctx, takes)
	if err != nil || len(res) != len(takes) {
		return limit.Take{}, nil, false
	}
	for i, r := range res {
		if r.Spent {
			t := takes[i]
			t.Fallback, t.WindowID = r.Fallback, r.WindowID
			counted = append(counted, t)
		}
	}
	if slices.ContainsFunc(res, func(r limit.Result) bool { return !r.Allowed || r.Fallback }) {
		return limit.Take{}, counted, false
	}
	hour = takes[0]
	hour.WindowID = res[0].WindowID
	return hour, counted, true
}

// takeBudget takes one lookup from the budget (countBudget); what was
// counted for a lookup not made is given back.
func (s *risk) takeBudget(ctx context.Context) (hour limit.Take, ok bool) {
	hour, counted, ok := s.countBudget(ctx)
	if !ok {
		s.giveBudgetBack(ctx, counted)
	}
	return hour, ok
}

// giveBudgetBack gives back what was counted for a lookup not made. A
// refund that fails leaves the place spent: fewer lookups, never more.
func (s *risk) giveBudgetBack(ctx context.Context, counted []limit.Take) {
	if len(counted) == 0 {
		return
	}
	if err := s.counter.Refund(context.WithoutCancel(ctx), counted); err != nil {
		s.log.WarnContext(ctx, "risk: refunding the lookup budget failed", "err", err)
	}
}

// earnBack gives a lookup that refused its send (a high score, a blocked
// number, a line type the policy does not allow) its place in the hour's
// window back, in the window it was counted in (hour.WindowID), and keeps
// it in the day's. Such a lookup paid: it refused a number the
// challenge would have let a solving bot spend an SMS or a solved place
// on, for a fraction of an SMS's price. A bot whose numbers score high
// therefore cannot drain the hour's lookups before real users are asked;
// its lookups are bounded by the day's window, the money cap, which is
// never given back. A bot of numbers the network does not refuse spends
// the hour as before. A refund that fails leaves the place spent: fewer
// lookups, never more.
func (s *risk) earnBack(ctx context.Context, hour limit.Take) {
	if err := s.counter.Refund(context.WithoutCancel(ctx), []limit.Take{hour}); err != nil {
		s.log.WarnContext(ctx, "risk: giving back a paying lookup's hour failed", "err", err)
	}
}

// riskBudgetKeys are the lookup budget's counters: one hour and one day
// window for the whole deployment.
func riskBudgetKeys() (hourKey, dayKey limit.Key) {
	return limit.Key{Space: "otp:risk", ID: "budget", Name: "h"}, limit.Key{Space: "otp:risk", ID: "budget", Name: "d"}
}

// lookupHold is one lookup's place in the budget, taken beside a send's
// first round trip (take) for a send whose refusal by an automatic rule
// would ask its risk score: an untrusted (or solved) send while otp.risk
// is on. Once the first round trip has answered, settle either starts the
// lookup at once, when the send was refused by an automatic rule and its
// number has no score cached (the lookup and the answer's cache write
// then run beside the refusal's give-backs), or gives the place back in
// the background, beside the send's next round trip. Most holds go back:
// the budget's windows count a send's place only while it is in flight,
// and the windows at rest count the lookups made (less the hours earned
// back); a send in flight may make another find the budget spent for a
// moment (fewer lookups, never more).
type lookupHold struct {
	risk  *risk
	phone Phone

	// Written by take, read after the first round trip.
	hour    limit.Take
	counted []limit.Take
	ok      bool

	once    sync.Once
	started bool // the lookup was started (answer waits for it)
	answer  RiskAnswer
	found   bool // the lookup answered
	wg      sync.WaitGroup
}

// hold is the lookup hold of a send of tier to phone whose abuse rules
// are abuse (nil: its refusal asks no score, or the score was judged
// before its limits).
func (s *risk) hold(phone Phone, tier Tier, abuse abuseTakes) *lookupHold {
	if abuse.refusal != nil || abuse.riskAsked || abuse.velocity == nil || abuse.velocity.Risk.ID == "" || tier == TierTrusted {
		return nil
	}
	return &lookupHold{risk: s, phone: phone}
}

// take counts the place (beside the send's first round trip).
func (h *lookupHold) take(ctx context.Context) {
	h.hour, h.counted, h.ok = h.risk.countBudget(ctx)
}

// settle starts the lookup when the send's refusal (automatic: by an
// automatic rule; sp: what spend read with it) asks the score and the
// number has none cached; otherwise it gives the place back in the
// background. Only its first call counts.
func (h *lookupHold) settle(ctx context.Context, sp spent, automatic bool) {
	if h == nil {
		return
	}
	h.once.Do(func() {
		c := sp.risk
		if !automatic || sp.storeFailed || !c.Read || c.Found && h.risk.verdict(c.Answer) != riskNone {
			h.wg.Go(func() { h.risk.giveBudgetBack(ctx, h.counted) })
			return
		}
		h.started = true
		h.wg.Go(func() {
			if !h.ok {
				h.risk.giveBudgetBack(ctx, h.counted)
				h.risk.told(ctx, h.phone, "over_budget", 0, RiskAnswer{})
				return
			}
			a, ok, cached := h.risk.lookUp(ctx, h.phone, h.hour)
			cached()
			h.answer, h.found = a, ok
		})
	})
}

// asked reports whether the lookup was started, and then waits for its
// answer (ok false: none, the budget spent or the lookup failed).
func (h *lookupHold) asked() (a RiskAnswer, ok, started bool) {
	if h == nil || !h.started {
		return RiskAnswer{}, false, false
	}
	h.wg.Wait()
	return h.answer, h.found, true
}

// wait gives back a place not settled yet and waits for what settle
// started: the send's answer leaves with its budget settled.
func (h *lookupHold) wait(ctx context.Context) {
	if h == nil {
		return
	}
	h.settle(ctx, spent{}, false)
	h.wg.Wait()
}
