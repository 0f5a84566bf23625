package guard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// limitedTake is one send limit and the code that refuses it.
type limitedTake struct {
	take   limit.Take
	denial problem.Code
	what   string
	// refundDenied: a denied hit is given back too (the budget's).
	refundDenied bool
	// operator: the ops desk's override set this limit; its refusal is
	// an operator's, which no challenge lifts (challenge.go).
	operator bool
	// cold: a window of the cold room, which the velocity reply settles
	// (coldroom.go).
	cold bool
}

// automatic reports whether l's refusal is an automatic rule's, as
// automaticRefusal judges the error refused makes of it: the prefix and
// country windows and the cold room's, unless an operator's override set
// them.
func (l limitedTake) automatic() bool {
	switch l.denial {
	case problem.CodePrefixRateLimited, problem.CodeCountryRateLimited, problem.CodeUnusualVolume:
		return !l.operator
	}
	return false
}

// spender takes a send's limits and gives back what a send that does not
// leave spent.
type spender struct {
	policies *servicePolicies // the deployment's policy, for a send that names none
	counter  limit.Counter
	blocks   Blocks
	audit    *audit
	velocity *velocity
	volumes  Volumes // the velocity counts' refunds
	budget   *budget // the budget's refusal is logged once per period
	room     *coldRoom
	log      *slog.Logger
	now      func() time.Time
}

// sendLimits are the limits of one send under p, its service's policy
// (servicepolicy.go). When the store cannot answer they
// fall back by the policy's on_store_error: with local, the cooldown is one
// send per number per cooldown and the per-number limit is local_limit, on
// each instance, while the per-IP limit is split (per_ip.limit / N); with
// open, all three are split; with closed, the send is refused. The slice
// leaves room for the more limits the abuse rules add, appended without a
// copy.
func sendLimits(p *OTPPolicy, phone Phone, ip, channel string, more int) []limitedTake {
	mode := p.OnStoreError
	fallback := func(t limit.Take, localLimit int64) limit.Take {
		t.Policy, t.OnStoreError = OTPPolicyName, mode
		if mode == limit.FallbackLocal {
			t.LocalLimit = localLimit
		}
		return t
	}
	ls := make([]limitedTake, 0, 4+more)
	if cd := p.Cooldown; cd > 0 {
		ls = append(ls, limitedTake{
			take:   fallback(limit.Take{Key: cooldownKey(phone), Algorithm: limit.FixedWindow, Limit: 1, Window: cd, Cost: 1}, 1),
			denial: problem.CodeCooldown, what: "a code was sent to this number moments ago",
		})
	}
	ls = append(ls, limitedTake{
		take: fallback(limit.Take{Key: phoneSendsKey(phone), Algorithm: limit.FixedWindow,
			Limit: p.PerPhone.Limit, Window: p.PerPhone.Window, Cost: 1}, p.LocalLimit),
		denial: problem.CodePhoneRateLimited, what: "too many codes were sent to this number",
	})
	// The channel's own window beside it (otp.channels; SMS has none): a
	// refusal of the number's too.
	if c := p.Channels[channel]; channel != ChannelSMS && c.PerPhone.Limit > 0 {
		ls = append(ls, limitedTake{
			take: fallback(limit.Take{Key: channelSendsKey(phone, channel), Algorithm: limit.FixedWindow,
				Limit: c.PerPhone.Limit, Window: c.PerPhone.Window, Cost: 1}, c.PerPhone.Limit),
			denial: problem.CodePhoneRateLimited, what: "too many codes were sent to this number by " + channel,
		})
	}
	if ip != "" {
		t := fallback(limit.Take{Key: limit.Key{Space: "otp:ip", ID: phone.in(ip), Name: "sends"}, Algorithm: limit.FixedWindow,
			Limit: p.PerIP.Limit, Window: p.PerIP.Window, Cost: 1}, 0)
		if mode == limit.FallbackLocal { // local_limit is per number: an address gets its share
			t.OnStoreError, t.LocalLimit = limit.FallbackOpen, 0
		}
		ls = append(ls, limitedTake{
			take:   t,
			denial: problem.CodeIPRateLimited, what: "too many codes were requested from this address",
		})
	}
	return ls
}

// priced charges the spend budget's takes among limits a channel's price
// (otp.channels; an SMS's is 1): a refund gives back what was charged.
func priced(limits []limitedTake, price int64) {
	if price <= 1 {
		return
	}
	for i := range limits {
		if limits[i].take.Key.Space == budgetHourKey.Space {
			limits[i].take.Cost = price
		}
	}
}

// spent is what a send's spend counted: the takes the store (or the
// fallback) counted, and the hour the velocity rule counted it in (zero:
// it did not).
type spent struct {
	takes      []limit.Take
	velocityAt time.Time
	velocity   volumeCount // what velocityAt counted under
	trusted    bool        // the store found the number trusted
	// On a refusal: the number's cached risk answer as the store read it
	// with the count, and whether the score was judged before the limits
	// (riskstep.go).
	risk        RiskCached
	riskAsked   bool
	baseline    int64 // the refused count's baseline: the country's busiest verified hour
	storeFailed bool  // the store failed (or a fallback decided) in the spend
	// lookup is the send's place in the lookup budget (riskstep.go),
	// its lookup started when the refusal asks the score.
	lookup  *lookupHold
	channel string
	policy  *servicePolicy // the send's service's, whose limits these were (servicepolicy.go)
	// held (holds: set) are the counts a refusal keeps while its score
	// is asked or a cached low one is weighed (heldTakes): the vouched
	// tier's own, which a low score keeps and any other answer gives
	// back (refusal.go).
	held  []limit.Take
	holds bool
	// vouched is a low-scored send's place in the vouched tier, taken
	// beside its code's save (vouchedplace.go); nil: none.
	vouched *vouchedPlace
	// uncut is, on a solved send a cut of the solved cap refused, its
	// count without the cuts, which a low score may take (vouched.go).
	uncut *VolumeTake
	// contested: a contested room took the send, whose score is asked
	// (contested.go).
	contested bool
}

// spend takes every limit of a send at once: one Counter call, which the
// store sends in one round trip (one per hash slot, in parallel, on
// Redis Cluster), each limit still its own atomic unit. With vol, the
// country velocity rule goes out in the same round trip when the counter
// is a SendCounter, and as a second step after the limits otherwise.
//
// Counting rule: the first limit that denies, in the order of limits,
// decides the answer and keeps its attempt (the budget's refundDenied
// gives its own back); every other limit the store counted for this
// request (those that passed, and those that denied alongside) is refunded,
// and so is the velocity count, so a denied request spends no other budget.
// Between the take and the refund a concurrent request may see a counter
// one higher than it will settle at: it can be refused, never allowed
// beyond a limit (docs/limits.md, "One round trip per send"). An
// automatic rule's refusal whose risk score is asked holds the counts the
// vouched tier would take again until the answer (heldTakes).
//
// The limits are the number's and the address's (sendLimits), then the
// abuse rules', then the service's own budget (servicepolicy.go), each
// as the send's service's policy sets it. It returns what it spent, for a send that does not leave
// to give back (giveBack).
func (s *spender) spend(ctx context.Context, phone Phone, ip string, abuse abuseTakes) (spent, error) {
	if abuse.refusal != nil { // refused before its limits: nothing taken
		return spent{riskAsked: true}, abuse.refusal
	}
	p := abuse.policy
	if p == nil {
		p = s.policies.base
	}
	limits := append(sendLimits(&p.OTPPolicy, phone, ip, abuse.channel, len(abuse.limits)+len(p.ownBudget)), abuse.limits...)
	limits = append(limits, p.ownBudget...)
	priced(limits, p.Channels[abuse.channel].Price)
	vol := abuse.velocity
	takes := make([]limit.Take, len(limits))
	for i, l := range limits {
		takes[i] = l.take
	}
	// The lookup budget's place of a send whose refusal may ask its risk
	// score goes beside (riskstep.go); the place is settled once this
	// round trip has answered: a refusal below may start its lookup,
	// anything else gives it back.
	var hold sync.WaitGroup
	if h := abuse.lookup; h != nil {
		hold.Go(func() { h.res, h.err = s.counter.Take(ctx, h.takes) })
	}
	res, vres, err := s.takeSend(ctx, takes, vol)
	hold.Wait()
	defer abuse.lookup.settle(ctx, spent{}, false)
	if err == nil && len(res) != len(takes) {
		err = fmt.Errorf("otp: store answered %d results for %d takes", len(res), len(takes))
	}
	if err != nil {
		return spent{}, s.spendFailed(ctx, err)
	}
	// The velocity reply says whether the country is cold: the room's
	// windows of a warm one are answered allowed and given back here
	// (coldroom.go).
	vres, warm := s.room.settle(ctx, phone, limits, takes, res, vol, vres)
	if lost := settleClaim(ctx, !slices.ContainsFunc(res, func(r limit.Result) bool { return r.Fallback })); lost != nil {
		s.refund(ctx, append(countedTakes(takes, res, nil), warm...))
		if volumeCounted(vol, vres) {
			s.refundVolume(ctx, tierKey(vol, vres), vol.Now)
		}
		return spent{}, lost
	}
	s.refund(ctx, warm)
	if vres != nil && vres.Trusted {
		// The store found the number trusted: the automatic rules counted
		// with the limits do not refuse it and give their count back.
		s.refund(ctx, dropAutomatic(takes, res))
	}
	deny := slices.IndexFunc(res, func(r limit.Result) bool { return !r.Allowed })
	// taken: what the store counted for this request, each refund going
	// where it was counted (the fallback's memory or the store).
	taken := countedTakes(takes, res, func(i int) bool { return i == deny && !limits[i].refundDenied })
	fellBack := slices.ContainsFunc(res, func(r limit.Result) bool { return r.Fallback })
	if deny >= 0 {
		var vel spent // the volume count to give back, if any
		if volumeCounted(vol, vres) {
			vel = spent{velocityAt: vol.Now, velocity: tierKey(vol, vres)}
		}
		sp := riskRead(vres, abuse, fellBack)
		// An automatic rule's refusal starts its lookup now, beside the
		// give-backs below.
		if abuse.lookup.settle(ctx, sp, limits[deny].automatic()) {
			sp.held, taken, sp.holds = heldTakes(taken)
			ctx = context.WithValue(ctx, besideKey{}, abuse.lookup)
		}
		return sp, s.refused(ctx, phone, limits[deny], res[deny], taken, vel)
	}
	switch {
	case vol == nil:
		return spent{takes: taken}, nil
	case (vol.Solved != nil || vol.Vouched) && (vres != nil && vres.Fallback || vres == nil && fellBack):
		// A solution's single use cannot be checked without the store
		// (on Redis Cluster: without the master of the country's keys),
		// nor the vouched tier's cap, which only the store keeps exact.
		s.refund(ctx, taken)
		return spent{}, limit.StoreUnavailable(limit.ErrStoreUnavailable, limit.StoreRetryAfter)
	case vres != nil:
		if !vres.Allowed {
			sp := riskRead(vres, abuse, fellBack)
			sp.uncut = uncutTake(vol, vres)
			// Every such refusal is automatic but a reused solution's.
			if abuse.lookup.settle(ctx, sp, !vres.Reused && !vol.Vouched) {
				sp.held, taken, sp.holds = heldTakes(taken)
				ctx = context.WithValue(ctx, besideKey{}, abuse.lookup)
			}
			return sp, s.volumeRefused(ctx, phone, *vol, *vres, taken)
		}
		if !volumeCounted(vol, vres) {
			return spent{takes: taken, trusted: vres.Trusted}, nil
		}
		sp := spent{takes: taken, velocityAt: vol.Now, velocity: tierKey(vol, vres), trusted: vres.Trusted}
		if contestedRoom(vol, vres, abuse.lookup) { // its score is asked too (contested.go)
			sp = contest(ctx, sp, vres, abuse.lookup)
		}
		return sp, nil
	case fellBack:
		// The fallback decided a limit (the breaker is open or the store
		// failed in this decision): the velocity rule is not judged then,
		// and the send does not wait on the store again.
		return spent{takes: taken}, nil
	}
	// A counter that cannot take the velocity rule with the limits: it
	// comes last, as its own step.
	counted, trusted, err := s.velocity.settle(ctx, phone, *vol, nil)
	if err != nil {
		s.refund(ctx, taken)
		return riskRead(nil, abuse, true), err
	}
	if !counted {
		return spent{takes: taken}, nil
	}
	return spent{takes: taken, velocityAt: vol.Now, velocity: tierKey(vol, &VolumeResult{Trusted: trusted}), trusted: trusted}, nil
}

// riskRead is the spent of a refused send: the cached risk answer the
// store read with its count (vres), and whether abuse was judged before.
func riskRead(vres *VolumeResult, abuse abuseTakes, fellBack bool) spent {
	sp := spent{riskAsked: abuse.riskAsked, storeFailed: fellBack, lookup: abuse.lookup, channel: abuse.channel, policy: abuse.policy}
	if vres != nil {
		sp.risk, sp.storeFailed, sp.baseline = vres.Risk, fellBack || vres.Fallback, vres.Baseline
	}
	return sp
}

// uncutTake is the count without the cuts of a solved send (vol) a cut
// of the solved cap refused (vres: the country's, or its carrier's),
// with no cached score to read again; nil for any other refusal.
func uncutTake(vol *VolumeTake, vres *VolumeResult) *VolumeTake {
	if vol.Solved == nil || vres.Reused || !vres.Quarantined {
		return nil
	}
	u, used := *vol, *vol.Solved
	used.Uncut = true
	u.Solved, u.Risk = &used, limit.Key{}
	return &u
}

// heldTakes splits what a refused send counted (taken, the refusing take
// left out) while its score may send it to the vouched tier: held, the
// tier's own limits (every limit but the automatic rules': the number's,
// the address's, the operator's and the spend budget), which a low score
// keeps instead of taking them again after the answer, and back, the
// automatic rules', given back now. A held count is a send's in flight:
// until the answer, a concurrent send may find it spent (the number's
// cooldown, say), never one more.
func heldTakes(taken []limit.Take) (held, back []limit.Take, holds bool) {
	for _, t := range taken {
		if t.Automatic {
			back = append(back, t)
		} else {
			held = append(held, t)
		}
	}
	return held, back, true
}

// besideKey carries, in a refused send's context, the lookup hold its
// give-backs and telling go beside (goBeside): a refusal whose score may
// send it to the vouched tier holds that tier's counts (heldTakes), and
// what it gives back and tells is nothing its answer waits for.
type besideKey struct{}

// goBeside runs f beside the send's next steps when ctx carries a hold
// (the send waits for it as it leaves, lookupHold.wait: the answer
// leaves with the store settled), and at once otherwise.
func goBeside(ctx context.Context, f func()) {
	if h, _ := ctx.Value(besideKey{}).(*lookupHold); h != nil {
		h.wg.Go(f)
		return
	}
	f()
}

// takeSend takes the send's limits, and vol with them when the counter
// is a SendCounter (nil VolumeResult otherwise).
func (s *spender) takeSend(ctx context.Context, takes []limit.Take, vol *VolumeTake) ([]limit.Result, *VolumeResult, error) {
	if sc, ok := s.counter.(SendCounter); ok && vol != nil {
		return sc.TakeSend(ctx, takes, vol)
	}
	res, err := s.counter.Take(ctx, takes)
	return res, nil, err
}

// spendFailed is spend's error when the store failed it: no
// Idempotency-Key claim was made then (a late answer is not taken).
func (s *spender) spendFailed(ctx context.Context, err error) error {
	_ = settleClaim(ctx, false) // the store did not answer: it carried no claim, none is lost
	s.log.Log(ctx, limit.StoreFailureLevel(err), "limit store failed", "limit", "otp.send", "err", err)
	return limit.StoreError(err)
}

// countedTakes returns the takes the store counted (res[i].Spent), each
// marked where it was counted (the fallback's memory or the store) and in
// which window, but those skip names (nil: none).
func countedTakes(takes []limit.Take, res []limit.Result, skip func(i int) bool) []limit.Take {
	counted := make([]limit.Take, 0, len(res))
	for i, r := range res {
		if !r.Spent || skip != nil && skip(i) {
			continue
		}
		t := takes[i]
		t.Fallback, t.WindowID = r.Fallback, r.WindowID
		counted = append(counted, t)
	}
	return counted
}

// dropAutomatic answers the automatic rules' takes allowed and not spent,
// and returns those the store counted, to refund.
func dropAutomatic(takes []limit.Take, res []limit.Result) []limit.Take {
	var counted []limit.Take
	for i, t := range takes {
		if !t.Automatic {
			continue
		}
		if res[i].Spent {
			t.Fallback, t.WindowID = res[i].Fallback, res[i].WindowID
			counted = append(counted, t)
		}
		res[i] = limit.Result{Allowed: true}
	}
	return counted
}

// volumeCounted reports whether the store counted vol (vres its answer).
func volumeCounted(vol *VolumeTake, vres *VolumeResult) bool {
	return vres != nil && vres.Allowed && !vres.Fallback && (vres.Trusted || !vol.NewOff)
}

// volumeCount is where a send's volume count went: its tier's counters
// (the velocity rule's, the trusted tier's or the solved cap's) and its
// carrier's within them (ID empty: none; carriershare.go).
type volumeCount struct {
	tier, carrier limit.Key
}

// tierKey is the counters vol counted in.
func tierKey(vol *VolumeTake, vres *VolumeResult) volumeCount {
	if vres.Trusted {
		return volumeCount{tier: vol.TrustedKey}
	}
	return volumeCount{tier: vol.Key, carrier: vol.Carrier.Key} // no carrier: its Key is empty
}

// refused answers the send refused by l (whose result is r): it gives
// back what the send took (taken, and the volume count vel names),
// at once, and notes the refusal.
func (s *spender) refused(ctx context.Context, phone Phone, l limitedTake, r limit.Result, taken []limit.Take, vel spent) error {
	// The refunds and the block's note go out at once: one round trip of
	// latency, waited for as refused returns, or beside the send's next
	// steps (goBeside). The number is blocked, not just its address. (Not
	// noted when the fallback decided: the block index lives in the store.)
	var wg sync.WaitGroup
	defer goBeside(ctx, wg.Wait)
	velocity, note := !vel.velocityAt.IsZero(), l.take.Key.Space == "otp" && !r.Fallback
	b := Block{Phone: phone.E164, Country: phone.Region, Reason: l.denial, Count: r.Count, Until: s.now().Add(r.RetryAfter)}
	if br, ok := s.blocks.(BlockVolumeRefunder); ok && velocity && note {
		wg.Go(func() { s.noteBlockRefundVolume(ctx, br, b, vel) })
	} else {
		if velocity {
			wg.Go(func() { s.refundVolume(ctx, vel.velocity, vel.velocityAt) })
		}
		if note {
			wg.Go(func() { s.audit.noteBlock(ctx, b) })
		}
	}
	wg.Go(func() { s.refund(ctx, taken) })
	if l.denial == problem.CodeBudgetExhausted {
		s.budget.refused(ctx, l.take.Key, r)
	}
	e := &problem.Error{Code: l.denial, Message: l.what, RetryAfter: r.RetryAfter,
		Usage: Usage(r.Count, l.take.Limit, l.take.Window)}
	if l.operator {
		e.Err = errOperatorLimit
	}
	return e
}

// noteBlockRefundVolume notes a refused send's block and gives back its
// volume count (vel) in one store call. It carries a refund, so it gets
// the store's budget (through the Fallback: its timeout, or up to the
// ceiling while the probe vouches for Redis), not convTimeout
// (refundVolume says why).
func (s *spender) noteBlockRefundVolume(ctx context.Context, br BlockVolumeRefunder, b Block, vel spent) {
	if err := br.NoteBlockRefundVolume(context.WithoutCancel(ctx), b, vel.velocity.tier, vel.velocity.carrier, vel.velocityAt); err != nil {
		// A lost refund only ever refuses more, never allows more.
		s.log.WarnContext(ctx, "noting a block and refunding its country count failed", "phone", MaskPhone(b.Phone), "err", err)
	}
}

// volumeRefused answers a send the velocity rule (or a tier's cap)
// refused: the refund of what the limits took goes out while the refusal
// is judged (its alert claims a round trip of its own), one round trip of
// latency for both.
func (s *spender) volumeRefused(ctx context.Context, phone Phone, vol VolumeTake, vres VolumeResult, taken []limit.Take) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.refund(ctx, taken) })
	_, _, err := s.velocity.settle(ctx, phone, vol, &vres)
	goBeside(ctx, wg.Wait)
	return err
}

func (s *spender) refund(ctx context.Context, takes []limit.Take) {
	if len(takes) == 0 {
		return
	}
	if err := s.counter.Refund(context.WithoutCancel(ctx), takes); err != nil {
		// A lost refund only ever refuses more, never allows more.
		s.log.WarnContext(ctx, "refund failed", "err", err)
	}
}

// refundVolume gives back a send counted at under k (the velocity
// rule's, the trusted tier's or the solved cap's counts, and its
// carrier's) that did not leave.
//
// A refund is part of the count, not of the watch: it gets the store's
// Redis budget (the client bounds a call without a deadline by
// max(OTPGUARD_REDIS_TIMEOUT, OTPGUARD_REDIS_MAX_WAIT)), as the limits'
// refunds in the same refusal do, and not convTimeout: a lost refund
// leaves a send that never went in the country's hour, for real users
// to be refused by (unusual_volume).
func (s *spender) refundVolume(ctx context.Context, k volumeCount, at time.Time) {
	if err := s.volumes.RefundVolume(context.WithoutCancel(ctx), k.tier, k.carrier, at); err != nil {
		s.log.WarnContext(ctx, "country velocity: refund failed", "err", err)
	}
}

// A number's own counters, named in its service (room.go).

func cooldownKey(p Phone) limit.Key {
	return limit.Key{Space: "otp", ID: p.E164, Name: p.in("cooldown")}
}

func phoneSendsKey(p Phone) limit.Key {
	return limit.Key{Space: "otp", ID: p.E164, Name: p.in("sends")}
}

// channelSendsKey counts a number's sends by channel (not SMS), beside
// its per-number window: the same hash tag, so one slot.
func channelSendsKey(p Phone, channel string) limit.Key {
	return limit.Key{Space: "otp", ID: p.E164, Name: p.in(channel + "_sends")}
}
