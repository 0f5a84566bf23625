package guard

import (
	"context"
	"errors"
	"log/slog"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// vouchedPlace is a low-scored send's place in the vouched tier's cap
// (vouched.go), taken beside its code's save (codebook.issueCode): the
// send holds every other limit of the tier from its first round trip
// (heldTakes), so after the lookup it waits on one round trip for the
// place and the code together. The cap is exact in the store: the place
// is taken by one script alone (the velocity script, or the solved cap's
// below), through the counter, and a store that cannot answer it is no
// place.
//
// A solved send the solved cap's cut refused (uncut) has one place or
// the other, in one atomic step (store: take_solved with the tier's
// place tried first): its place in the tier while the tier's cap has
// room, else its place in the solved cap without its cuts. It waits on
// no more round trips than a send without one, and holds one place,
// never both: neither cap's count ever holds a place its send did not
// keep.
//
// Should the cap refuse (or the store fail), the code saved beside it
// never leaves: it is deleted, as an undelivered one is, and like one it
// has replaced the number's earlier code. The send then gives back what
// it held (giveBack) and gets what it would without a score (without:
// the challenge).
type vouchedPlace struct {
	counter  limit.Counter
	velocity *velocity
	phone    Phone
	vol      VolumeTake
	log      *slog.Logger
	// without is the send's answer without its score (challenges.refused).
	without func(ctx context.Context) error
	// uncut (nil: none) is a solved send's count in the solved cap
	// without its cuts (vouched.go), taken should the tier's cap refuse.
	uncut *VolumeTake

	// What take did, read once it returned: counted (a refund is owed
	// if the send does not leave), or refused (the send holds nothing).
	counted, refused bool
}

// take takes the place, or the uncut one should the tier's cap refuse:
// nil, or the send's answer without them.
func (v *vouchedPlace) take(ctx context.Context) error {
	err := v.count(ctx)
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

// count counts the send in the tier's hour, or in the uncut cap's when
// it has one and the tier's cap refuses (v.vol is then the uncut take:
// a refund goes where it was counted). With a SendCounter it is the
// velocity script alone, or the solved cap's with the tier's place
// tried first (SolvedUse.Vouched), with no Idempotency-Key claim, which
// the send's first round trip carried; on its own otherwise
// (velocity.settle), one place after the other. A refusal is the tier's
// (errVouchedCap): a reused solution's too, which a concurrent send
// spent; a call that timed out may have counted, and is not retried nor
// refunded: fewer sends, never more.
func (v *vouchedPlace) count(ctx context.Context) error {
	sc, ok := v.counter.(SendCounter)
	if !ok {
		return v.countAlone(ctx)
	}
	take := &v.vol
	if v.uncut != nil {
		take = v.vouchedFirst()
	}
	_, vres, err := sc.TakeSend(context.WithValue(ctx, sendClaimKey{}, (*SendClaim)(nil)), nil, take)
	switch {
	case err != nil:
		v.log.Log(ctx, limit.StoreFailureLevel(err), "limit store failed", "limit", "otp.risk.vouched", "err", err)
		return limit.StoreError(err)
	case vres == nil || vres.Fallback: // the fallback cannot keep the cap exact
		return limit.StoreUnavailable(limit.ErrStoreUnavailable, limit.StoreRetryAfter)
	case !vres.Allowed:
		_, _, err := v.velocity.settle(ctx, v.phone, v.vol, vres)
		return err
	case v.uncut != nil && !vres.Vouched: // the solved cap without its cuts counted it
		v.vol = *v.uncut
	}
	return nil
}

// vouchedFirst is the uncut take carrying the tier's place, to be tried
// first in the same step.
func (v *vouchedPlace) vouchedFirst() *VolumeTake {
	u, used, place := *v.uncut, *v.uncut.Solved, v.vol
	used.Vouched = &place
	u.Solved = &used
	return &u
}

// countAlone counts the send with a counter that is not a SendCounter:
// the tier's place, then, should its cap refuse, the uncut one.
func (v *vouchedPlace) countAlone(ctx context.Context) error {
	_, _, err := v.velocity.settle(ctx, v.phone, v.vol, nil)
	if !errors.Is(err, errVouchedCap) || v.uncut == nil {
		return err
	}
	if counted, _, uerr := v.velocity.takeAlone(ctx, v.phone, *v.uncut); uerr != nil || !counted {
		return err
	}
	v.vol = *v.uncut
	return nil
}
