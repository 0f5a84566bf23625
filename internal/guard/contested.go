package guard

import (
	"context"
	"sync"
)

// A contested room: while the velocity rule has refused an untrusted send
// of a room in the hour under way or the one before (the store marks the
// hour, lua/take_volume.lua), its places are scarcer than its sends, and
// whoever takes one first keeps it. A bot that sprays new numbers takes
// most of them before the first real user of the hour arrives, and the
// network's risk score, asked only of the sends a rule refuses, never
// sees the bot's numbers that got a place. So with the score on, a send
// such a room takes has its score asked too: a high score (or a line type
// the policy does not allow) refuses it and gives its place back, for a
// real user's; any other answer, or none (the budget spent, Lookup slow or
// failing), lets it go as it would have gone.
//
// The economics: a lookup costs about a sixth of an SMS, and pays only
// where a place is contested; a room no rule refused asks nothing. The
// send waits on the lookup and on no more round trips: its place in the
// lookup budget went beside its first round trip (lookupHold), the lookup
// starts as that round trip answers, and the cache write goes beside the
// code's save, or beside the give-back of a refused send.

// contestedRoom reports whether a send the velocity rule took (vol, its
// answer vres) in a contested room has its score asked: an untrusted
// send of the new-number tier with a place in the lookup budget held
// (hold), the store having counted it.
func contestedRoom(vol *VolumeTake, vres *VolumeResult, hold *lookupHold) bool {
	return hold != nil && vres.Contested && !vres.Trusted && !vres.Fallback && vol.Solved == nil && !vol.Vouched
}

// contest starts the score's lookup of sp, a send a contested room took,
// unless its answer is cached (read with its count): the lookup runs
// while the send goes on to its next step (risk.contested).
func contest(ctx context.Context, sp spent, vres *VolumeResult, hold *lookupHold) spent {
	sp.contested, sp.risk, sp.lookup = true, vres.Risk, hold
	hold.settle(ctx, sp, true)
	return sp
}

// contested is the score's word on sp, a send a contested room took: a
// refusal, with everything the send counted given back, or nil.
func (s *risk) contested(ctx context.Context, phone Phone, sp spent) error {
	if !sp.contested {
		return nil
	}
	// An answer the store could not read with the count (a named
	// service's room on Redis Cluster: the cache is in another slot) is
	// read, and asked, in round trips of their own (answer).
	a, ok, cached := s.answer(ctx, phone, sp.risk, sp.lookup)
	defer cached()
	if !ok {
		return nil
	}
	err := s.refusal(a)
	if err == nil {
		return nil
	}
	var back sync.WaitGroup
	back.Go(func() { s.spend.refund(ctx, sp.takes) })
	if !sp.velocityAt.IsZero() {
		back.Go(func() { s.spend.refundVolume(ctx, sp.velocity, sp.velocityAt) })
	}
	back.Wait()
	return err
}
