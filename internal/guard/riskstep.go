package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// What a send does with the network's risk score (risk.go). The score is
// asked where a send would otherwise be challenged or refused: an
// untrusted send an automatic rule refused, and a solved send the solved
// cap refused (the challenges step, challenge.go, consults it before it
// answers 428), an untrusted send a contested room took (contested.go),
// and, before its limits, every untrusted send to a country of
// otp.risk.countries. A cached answer comes with the refusal: the
// velocity script reads it in the send's own round trip (VolumeTake.Risk).
// Without one, a lookup is taken from the deployment's budget (an hour and
// a day window, its place taken beside the send's first round trip:
// lookupHold; a budget the store cannot count means no lookup), asked
// within otp.risk.timeout beside the refusal's give-backs, and cached
// beside the send's next round trip. While the score is asked the refusal
// holds the counts the vouched tier keeps (heldTakes); a low score keeps
// them and takes the tier's own cap per country and hour beside the
// code's save (vouchedplace.go), any other answer gives them back. The
// vouched tier is not trust: the send keeps every per-number,
// per-address, cooldown and operator limit and the spend budget, and its
// tier (new or solved) for its verification's mark and its verify's credit.

// risk is the risk step of a send.
type risk struct {
	policy  RiskPolicy
	lookup  RiskLookup // nil: no lookup available, the rule is off
	risks   Risks      // the cache; nil: off
	counter limit.Counter
	hmacKey []byte
	types   []string // otp.allowed_number_types
	pumping *pumping
	spend   *spender
	trust   *trust
	hooks   RiskHooks
	events  EventSink
	log     *slog.Logger
	now     func() time.Time
}

// on reports whether scores are asked: mode on, a lookup, a cache, and
// the volume store the vouched tier counts in.
func (s *risk) on() bool {
	return s.policy.Mode == RiskOn && s.lookup != nil && s.risks != nil && s.pumping.velocity.volumes != nil
}

// key is the cache key the velocity (or solved cap's) script reads with a
// send of tier (ID "": none): only an untrusted or a solved send may be
// refused for a score.
func (s *risk) key(phone Phone, tier Tier) limit.Key {
	if !s.on() || tier == TierTrusted || s.pumping.safe.has(phone.E164) {
		return limit.Key{}
	}
	return riskKey(s.hmacKey, phone)
}

// riskVerdict is what an answer says of a send.
type riskVerdict int

const (
	riskNone riskVerdict = iota // no answer, or one too old for its class
	riskHigh
	riskMid
	riskLow
)

func (v riskVerdict) String() string {
	return [...]string{"none", "high", "mid", "low"}[v]
}

// verdict is a's class under the policy in force, none when a is older
// than its class is cached for (a policy reloaded with a shorter time
// does not keep older answers): never an allow on a stale low score.
func (s *risk) verdict(a RiskAnswer) riskVerdict {
	p, age := s.policy, s.now().Sub(a.At)
	v, keep := riskMid, p.MidFor
	switch {
	case a.Blocked || a.Score >= p.RefuseAbove:
		v, keep = riskHigh, p.HighFor
	case a.Score <= p.AllowBelow:
		v, keep = riskLow, p.LowFor
	}
	if age > keep || age < -time.Minute { // from a clock far ahead: not trusted either
		return riskNone
	}
	return v
}

// before asks the velocity script to read an untrusted send's cached
// score with its count, and judges a send to a country of
// otp.risk.countries before its limits, abuse the rules it would meet: a
// high score (or a line type the policy does not allow) refuses at once
// (abuse carries the refusal, which spend answers before it takes
// anything). Any other answer leaves abuse as it is: a low score is now
// cached, and should an automatic rule refuse the send, the refusal finds
// it there (instead) and the send goes to the vouched tier; without an
// answer the send is marked asked, so that its refusal does not ask
// again. A number whose trust mark is set is not judged (the mark is read
// with the cache, one round trip).
func (s *risk) before(ctx context.Context, phone Phone, tier Tier, abuse abuseTakes) abuseTakes {
	if abuse.velocity != nil && !abuse.velocity.Trusted {
		// An automatic refusal of an untrusted send, or the solved cap's
		// of a solved one, consults its risk score: the script reads a
		// cached one with the count.
		abuse.velocity.Risk = s.key(phone, tier)
	}
	if s.on() && tier == TierNew && slices.Contains(s.policy.Countries, phone.Region) && !s.pumping.safe.has(phone.E164) {
		return s.judge(ctx, phone, abuse)
	}
	// Should a rule refuse the send, its lookup's place is taken beside
	// its first round trip (lookupHold).
	abuse.lookup = s.hold(phone, tier, abuse)
	return abuse
}

// judge judges a send to a country of otp.risk.countries before its
// limits (before).
func (s *risk) judge(ctx context.Context, phone Phone, abuse abuseTakes) abuseTakes {
	var mark limit.Key
	if s.trust.on() {
		mark = trustMarkKey(s.trust.hmacKey, phone)
	}
	c, err := s.read(ctx, phone, mark)
	if err != nil || c.Trusted {
		abuse.riskAsked = err != nil
		return abuse
	}
	a, ok, cached := s.answer(ctx, phone, c, nil)
	cached() // the send's script reads it should a rule refuse the send
	switch {
	case !ok:
		abuse.riskAsked = true
	default:
		abuse.refusal = s.refusal(a)
	}
	return abuse
}

// refusal is the refusal a's answer makes: a line type the policy does not
// allow (as the static type would be refused), or a high score; nil
// otherwise.
func (s *risk) refusal(a RiskAnswer) error {
	if t := riskNumberType(a.LineType); t != "" && len(s.types) > 0 && !slices.Contains(s.types, t) {
		return problem.Errorf(problem.CodeNumberTypeNotAllowed, "codes are not sent to this type of number (%s)", t)
	}
	if s.verdict(a) != riskHigh {
		return nil
	}
	age := max(0, s.now().Sub(a.At)).Round(time.Second)
	msg := fmt.Sprintf("the network's risk score of this number is %d (fetched %s ago); codes are not sent to it", a.Score, age)
	if a.Blocked {
		msg = fmt.Sprintf("the network blocks this number (risk score %d, fetched %s ago); codes are not sent to it", a.Score, age)
	}
	return &problem.Error{Code: problem.CodeHighRiskNumber, Message: msg,
		Usage: fmt.Sprintf("risk score %d (refuse_above %d), blocked %t, age %s", a.Score, s.policy.RefuseAbove, a.Blocked, age)}
}

// answer is phone's answer: the one the send's hold asked for (h, when
// it started a lookup), the cached one (c, when the send's script read
// it; else read now), or one asked of the network within the budget, and
// cached. ok false: none (the store failed, the budget is spent or
// uncountable, the lookup failed or was slow). cached waits for the new
// answer's cache write (a no-op when none is made, or the hold waits):
// the caller may make its next round trip beside it.
func (s *risk) answer(ctx context.Context, phone Phone, c RiskCached, h *lookupHold) (a RiskAnswer, ok bool, cached func()) {
	if a, ok, started := h.asked(); started {
		return a, ok, func() {}
	}
	if !c.Read {
		var err error
		if c, err = s.read(ctx, phone, limit.Key{}); err != nil {
			return RiskAnswer{}, false, func() {}
		}
	}
	if c.Found && s.verdict(c.Answer) != riskNone {
		return c.Answer, true, func() {}
	}
	return s.ask(ctx, phone)
}

// read reads phone's cached answer (and mark, when its ID is set).
func (s *risk) read(ctx context.Context, phone Phone, mark limit.Key) (RiskCached, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	c, err := s.risks.CachedRisk(cctx, riskKey(s.hmacKey, phone), mark)
	if err != nil {
		s.log.WarnContext(ctx, "risk: reading a cached score failed", "err", err)
	}
	return c, err
}

// ask takes one lookup from the budget and asks the network (lookUp).
func (s *risk) ask(ctx context.Context, phone Phone) (a RiskAnswer, ok bool, cached func()) {
	hour, ok := s.takeBudget(ctx)
	if !ok {
		s.told(ctx, phone, "over_budget", 0, RiskAnswer{})
		return RiskAnswer{}, false, func() {}
	}
	return s.lookUp(ctx, phone, hour)
}

// lookUp asks the network of phone, its place in the budget taken (hour:
// the hour's window it was counted in), and caches the answer for its
// class's time; cached waits for the cache write and, for an answer that
// refuses the send, its hour's place given back (earnBack).
func (s *risk) lookUp(ctx context.Context, phone Phone, hour limit.Take) (a RiskAnswer, ok bool, cached func()) {
	lctx, cancel := context.WithTimeout(ctx, s.policy.Timeout)
	start := time.Now()
	a, err := s.lookup.LookupRisk(lctx, phone.E164)
	d := time.Since(start)
	cancel()
	if err != nil {
		s.log.WarnContext(ctx, "risk: lookup failed", "phone", MaskPhone(phone.E164), "err", err)
		s.told(ctx, phone, "error", d, RiskAnswer{})
		return RiskAnswer{}, false, func() {}
	}
	a.At = s.now()
	v := s.verdict(a)
	s.told(ctx, phone, v.String(), d, a)
	// Two slots (the budget's tag, the country's): two round trips, side
	// by side and beside the caller's next one.
	var wg sync.WaitGroup
	if s.refusal(a) != nil {
		wg.Go(func() { s.earnBack(ctx, hour) })
	}
	keep := map[riskVerdict]time.Duration{riskHigh: s.policy.HighFor, riskLow: s.policy.LowFor, riskMid: s.policy.MidFor}[v]
	wg.Go(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
		defer cancel()
		if err := s.risks.CacheRisk(cctx, riskKey(s.hmacKey, phone), a, keep); err != nil {
			s.log.WarnContext(ctx, "risk: caching a score failed", "err", err)
		}
	})
	return a, true, wg.Wait
}

// told tells the metrics and the audit trail of one lookup (result:
// high, low, mid, none, error or over_budget): the score and the
// country, never the number.
func (s *risk) told(ctx context.Context, phone Phone, result string, d time.Duration, a RiskAnswer) {
	if f := s.hooks.Lookup; f != nil {
		f(result, d)
	}
	detail := fmt.Sprintf("took %s", d.Round(time.Millisecond))
	if result != "over_budget" && result != "error" {
		detail = fmt.Sprintf("score %d, blocked %t, line type %q, took %s", a.Score, a.Blocked, a.LineType, d.Round(time.Millisecond))
	}
	s.events.Record(Event{At: s.now(), Action: ActionRiskLookup, Outcome: result, Country: phone.Region,
		Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
}

// riskNumberType is the otp.allowed_number_types name of Lookup's line
// type t; "" when t says nothing (the static type stands).
func riskNumberType(t string) string {
	switch t {
	case "mobile":
		return "mobile"
	case "landline":
		return "fixed_line"
	case "fixedVoip", "nonFixedVoip":
		return "voip"
	case "personal":
		return "personal_number"
	case "tollFree":
		return "toll_free"
	case "premium":
		return "premium_rate"
	case "sharedCost":
		return "shared_cost"
	case "uan", "voicemail", "pager":
		return t
	}
	return ""
}

// riskKey is the cache key of phone's answer: the first 128 bits of
// HMAC-SHA256(key, "risk:" + E.164), base64url, under the country's hash
// tag (as trustMarkKey, but every service's), so that the velocity script
// reads it with the country's counts (on Redis Cluster a named service's
// room is in another slot: the store leaves it unread, VolumeResult.Risk).
func riskKey(hmacKey []byte, phone Phone) limit.Key {
	m := hmac.New(sha256.New, hmacKey)
	m.Write([]byte("risk:"))
	m.Write([]byte(phone.E164))
	return limit.Key{Space: "otp:risk", ID: region(phone), Name: base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])}
}

// The lookup budget: an hour's and a day's fixed window for the whole
// deployment, each a MULTI INCR + EXPIRE NX in the store, so that the
// lookups of every instance count together; a send's place is taken
// beside its first round trip (lookupHold).

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
	return budgetCounted(takes, res, err)
}

// budgetCounted reads the budget's answer (res, err) to its takes, as
// countBudget says.
func budgetCounted(takes []limit.Take, res []limit.Result, err error) (hour limit.Take, counted []limit.Take, ok bool) {
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
// window back, in the window it was counted in, and keeps it in the
// day's, the money cap: such a lookup paid, so a bot whose numbers score
// high cannot drain the hour's lookups before real users are asked
// (docs/abuse.md). A refund that fails leaves the place spent.
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

// lookupHold is one lookup's place in the budget, taken beside the first
// round trip (spend takes its takes) of a send whose refusal by an
// automatic rule would ask its score. settle then starts the lookup at
// once for such a refusal with no score cached (it runs beside the
// refusal's give-backs, its cache write beside the send's next round
// trip), or gives the place back beside that round trip. At rest the
// windows count the lookups made; a place in flight may make another
// send find the budget spent for a moment (fewer lookups, never more).
type lookupHold struct {
	risk  *risk
	phone Phone
	takes []limit.Take // the budget's windows, one lookup each

	// The store's answer to takes, from the spend's round trip.
	res []limit.Result
	err error

	once     sync.Once
	started  bool // the lookup was started (answer waits for it)
	answer   RiskAnswer
	found    bool           // the lookup answered
	answered sync.WaitGroup // the answer is in (asked)
	wg       sync.WaitGroup // and its cache write done (wait)
}

// hold is the lookup hold of a send of tier to phone whose abuse rules
// are abuse (nil: its refusal asks no score, or the score was judged
// before its limits).
func (s *risk) hold(phone Phone, tier Tier, abuse abuseTakes) *lookupHold {
	if abuse.refusal != nil || abuse.riskAsked || abuse.velocity == nil || abuse.velocity.Risk.ID == "" || tier == TierTrusted {
		return nil
	}
	return &lookupHold{risk: s, phone: phone, takes: s.budgetTakes()}
}

// settle starts the lookup when the send's refusal (automatic: by an
// automatic rule; sp: what spend read with it) asks the score and the
// number has none cached; otherwise it gives the place back in the
// background. Only its first call counts. vouchable: the lookup was
// started, or the refusal found a low score cached: the score may send
// it to the vouched tier, so the refusal holds the tier's counts
// (heldTakes).
func (h *lookupHold) settle(ctx context.Context, sp spent, automatic bool) (vouchable bool) {
	if h == nil {
		return false
	}
	h.once.Do(func() {
		hour, counted, ok := budgetCounted(h.takes, h.res, h.err)
		c := sp.risk
		if !automatic || sp.storeFailed || !c.Read || c.Found && h.risk.verdict(c.Answer) != riskNone {
			vouchable = automatic && !sp.storeFailed && c.Read && c.Found && h.risk.verdict(c.Answer) == riskLow
			h.wg.Go(func() { h.risk.giveBudgetBack(ctx, counted) })
			return
		}
		h.started, vouchable = true, true
		h.answered.Add(1)
		h.wg.Go(func() {
			cached := func() {}
			if ok {
				h.answer, h.found, cached = h.risk.lookUp(ctx, h.phone, hour)
			} else {
				h.risk.giveBudgetBack(ctx, counted)
				h.risk.told(ctx, h.phone, "over_budget", 0, RiskAnswer{})
			}
			h.answered.Done()
			cached()
		})
	})
	return vouchable
}

// asked reports whether the lookup was started, and then waits for its
// answer (ok false: none, the budget spent or the lookup failed), not
// for its cache write (wait does).
func (h *lookupHold) asked() (a RiskAnswer, ok, started bool) {
	if h == nil || !h.started {
		return RiskAnswer{}, false, false
	}
	h.answered.Wait()
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
