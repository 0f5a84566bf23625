package guard

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// vouchedPlace is a low-scored send's place in the vouched tier's cap
// (vouched.go), taken beside its code's save (codebook.issueCode): the
// send holds every other limit of the tier from its first round trip
// (heldTakes), so after the lookup it waits on one round trip for the
// place and the code together. The cap is exact in the store: the place
// is taken by the velocity script alone, through the counter, and a
// store that cannot answer it is no place.
//
// A solved send the solved cap's cut refused takes, beside the place and
// in the same round trip, its place in that cap without its cuts (uncut),
// kept should the tier's cap refuse: it waits on no third round trip for
// it (the uncut place is the solved cap's, an atomic script of its own,
// which only the tier's answer decides to keep). A place it did not need
// is given back beside its next steps (the provider's call) and waited
// for as it leaves (lookupHold.wait); until then the uncut cap holds one
// place more than it will settle at, so a concurrent solved send may be
// refused by it, never one more let through.
//
// Should the cap refuse (or the store fail), the code saved beside it
// never leaves: it is deleted, as an undelivered one is, and like one it
// has replaced the number's earlier code. The send then gives back what
// it held (giveBack) and gets what it would without a score (without:
// the challenge).
type vouchedPlace struct {
	counter  limit.Counter
	velocity *velocity
	spend    *spender // the uncut place's give-back
	phone    Phone
	vol      VolumeTake
	log      *slog.Logger
	// without is the send's answer without its score (challenges.refused).
	without func(ctx context.Context) error
	// uncut (nil: none) is a solved send's count in the solved cap
	// without its cuts (vouched.go), kept should the tier's cap refuse.
	uncut *VolumeTake
	// hold is the send's lookup hold, which it waits for as it leaves
	// (nil: the give-back is waited for at once).
	hold *lookupHold

	// What take did, read once it returned: counted (a refund is owed
	// if the send does not leave), or refused (the send holds nothing).
	counted, refused bool
}

// take takes the place, and the uncut one beside it: nil, or the send's
// answer without them.
func (v *vouchedPlace) take(ctx context.Context) error {
	var beside sync.WaitGroup
	uncut := false
	if v.uncut != nil {
		beside.Go(func() { uncut = v.countUncut(ctx) })
	}
	err := v.count(ctx)
	beside.Wait()
	if errors.Is(err, errVouchedCap) && uncut {
		v.vol, v.counted = *v.uncut, true // its refund goes to the solved cap's counts
		return nil
	}
	if uncut { // the tier counted it, or the store failed in its place
		v.giveUncutBack(ctx)
	}
	if err == nil {
		v.counted = true
		return nil
	}
	v.refused = true
	if errors.Is(err, errVouchedCap) || problem.CodeOf(err) == problem.CodeStoreUnavailable {
		return v.without(ctx)
	}
	return err // overloaded: shed, as any send's count is
}

// countUncut counts a solved send in the solved cap without its cuts
// (v.uncut), beside its place in the tier. It reports whether the cap
// counted it; a refusal, or a store that cannot answer, is no place (a
// call that timed out may have counted, and is not retried nor given
// back: fewer sends, never more).
func (v *vouchedPlace) countUncut(ctx context.Context) bool {
	sc, ok := v.counter.(SendCounter)
	if !ok {
		counted, _, err := v.velocity.takeAlone(ctx, v.phone, *v.uncut)
		return err == nil && counted
	}
	_, vres, err := sc.TakeSend(context.WithValue(ctx, sendClaimKey{}, (*SendClaim)(nil)), nil, v.uncut)
	if err != nil {
		v.log.Log(ctx, limit.StoreFailureLevel(err), "limit store failed", "limit", "otp.challenge.uncut", "err", err)
		return false
	}
	return vres != nil && vres.Allowed && !vres.Fallback
}

// giveUncutBack gives back the uncut count of a send that did not need
// it, in the hour it was counted in, beside the send's next steps
// (goBeside: the send waits for it as it leaves). Its solution stays
// used, as any solution a send counted with (should the store have failed
// in the tier's place, the send is refused and the solution spent). A
// give-back that fails leaves the place spent: fewer sends, never more.
func (v *vouchedPlace) giveUncutBack(ctx context.Context) {
	u := *v.uncut
	goBeside(context.WithValue(ctx, besideKey{}, v.hold), func() {
		v.spend.refundVolume(ctx, volumeCount{tier: u.Key, carrier: u.Carrier.Key}, u.Now)
	})
}

// count counts the send in the tier's hour: with a SendCounter, the
// velocity script alone (with no Idempotency-Key claim, which the send's
// first round trip carried), and on its own otherwise (velocity.settle).
// A refusal is the tier's (errVouchedCap); a call that timed out may have
// counted, and is not retried nor refunded: fewer sends, never more.
func (v *vouchedPlace) count(ctx context.Context) error {
	sc, ok := v.counter.(SendCounter)
	if !ok {
		_, _, err := v.velocity.settle(ctx, v.phone, v.vol, nil)
		return err
	}
	_, vres, err := sc.TakeSend(context.WithValue(ctx, sendClaimKey{}, (*SendClaim)(nil)), nil, &v.vol)
	switch {
	case err != nil:
		v.log.Log(ctx, limit.StoreFailureLevel(err), "limit store failed", "limit", "otp.risk.vouched", "err", err)
		return limit.StoreError(err)
	case vres == nil || vres.Fallback: // the fallback cannot keep the cap exact
		return limit.StoreUnavailable(limit.ErrStoreUnavailable, limit.StoreRetryAfter)
	case !vres.Allowed:
		_, _, err := v.velocity.settle(ctx, v.phone, v.vol, vres)
		return err
	}
	return nil
}
