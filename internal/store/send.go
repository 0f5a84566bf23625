package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// An OTP send's limits in one round trip (guard's spend step). On a single
// Redis every limit and the country velocity rule's count go out in one
// MULTI/EXEC: each fixed window is its own INCRBY + PEXPIRE NX (the
// design's rule, never GET-then-SET), the velocity rule its own script
// (velocityScript), and the MULTI makes the lot one atomic step and one
// write. On Redis Cluster a MULTI may touch one hash slot only, and MULTIs
// on different slots land in no common order: sent all at once, a request
// that one limit refuses would inflate the counters of the others (until
// its refund) while the requests that limit lets through are counted
// there, and could be refused by them: fewer sends than a limit allows.
// So on Cluster the limits go one slot at a time, in their order (the
// number's cooldown and per-number window share one), each a MULTI, and a
// later limit counts only requests every earlier one let through, as the
// counting rule has it: one round trip per slot, and fewer, with nothing
// to refund, for a request refused early.
//
// Nothing here decides whether the send goes on: every limit is counted
// whatever the others answer, and the caller refunds what a denied send
// must not keep (the counting rule of guard's spend step).

// sends is Counters.TakeSend: an OTP send's limits, its automatic windows
// (automatic.go), the velocity count (Velocity) and an Idempotency-Key's
// claim (IdempotencyKeys), in one MULTI.
type sends struct {
	keyspace
	counters    *Counters
	velocity    *Velocity
	idempotency *IdempotencyKeys
}

// take is TakeSend.
func (r *sends) take(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	if r.cluster {
		return r.takeCluster(ctx, takes, vol)
	}
	if vol == nil {
		res, err := r.counters.Take(ctx, takes)
		return res, nil, err
	}
	pipe := r.rdb.TxPipeline()
	// An Idempotency-Key's claim goes first in the MULTI (sendclaim.go in
	// guard): a duplicate's limits count only after the claim's winner's.
	claim := guard.SendClaimFrom(ctx)
	var ccmd *redis.Cmd
	if claim != nil {
		ccmd = claimIdempotencyScript.EvalSha(ctx, pipe, []string{r.idempotency.recordKey(claim.Digest)}, claim.Body, claim.Token, claim.Pending.Milliseconds())
	}
	// The automatic windows of a send whose trust the velocity script is
	// to find go in a script that reads the mark too (automatic.go).
	autoIdx := automaticTakes(takes, vol)
	rest, kept := withoutTakes(takes, autoIdx)
	cmds, err := r.counters.queueTakes(ctx, pipe, rest)
	if err != nil {
		return nil, nil, err
	}
	auto := r.queueAutomatic(ctx, pipe, takes, autoIdx, vol.Mark, vol.Now)
	vscript, vkeys, vargs := r.velocity.volumeCall(*vol)
	vcmd := vscript.EvalSha(ctx, pipe, vkeys, vargs...)
	// As in take: a NOSCRIPT or a peek's redis.Nil is one command's reply,
	// read below; any other error failed the round trip.
	_, err = pipe.Exec(ctx)
	if err != nil && !isNoScript(err) && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("store: take send: %w", err)
	}
	got, err := r.counters.readTakes(ctx, rest, cmds)
	if err != nil {
		return nil, nil, err
	}
	res := make([]limit.Result, len(takes))
	for n, i := range kept {
		res[i] = got[n]
	}
	if auto != nil {
		if err := r.readAutomatic(ctx, takes, auto, res); err != nil {
			return nil, nil, err
		}
	}
	if isNoScript(vcmd.Err()) {
		// The server lost its script cache: the script did not run, so
		// running it again counts once (EVAL, which reloads the cache).
		vcmd = vscript.Run(ctx, r.rdb, vkeys, vargs...)
	}
	vres, err := r.velocity.volumeResult(*vol, vcmd)
	if err != nil {
		return nil, nil, err
	}
	carryClaim(claim, ccmd)
	return res, &vres, nil
}

// carryClaim hands the claim's reply to claim. A claim that did not run
// (NOSCRIPT: the server lost its script cache) or failed is not carried:
// the send claims on its own round trip (guard.SendClaim.Separate).
func carryClaim(claim *guard.SendClaim, cmd *redis.Cmd) {
	if claim == nil {
		return
	}
	v, err := cmd.Slice()
	if err != nil {
		return
	}
	if state, answer, err := claimReply(v); err == nil {
		claim.Carry(state, answer)
	}
}

// takeCluster takes the limits one slot at a time, in their order (a
// group is a run of takes in one slot: the number's cooldown and per-number
// window are one), each group one MULTI, and the velocity count last. A
// group that refuses ends the send: the groups after it are answered
// allowed and not spent (nothing to refund), and the velocity count is
// not taken.
func (r *sends) takeCluster(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	res := make([]limit.Result, len(takes))
	vol, skip, err := r.clusterTrust(ctx, vol)
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i < len(takes); {
		if skip && takes[i].Automatic { // trusted: the automatic rules are not taken
			res[i] = limit.Result{Allowed: true}
			i++
			continue
		}
		slot := Slot(r.key(takes[i].Key))
		n := i + 1
		for n < len(takes) && Slot(r.key(takes[n].Key)) == slot {
			n++
		}
		got, err := r.counters.Take(ctx, takes[i:n])
		if err != nil {
			// What earlier groups counted goes back, as the caller gives
			// back nothing of a request the store failed.
			if rerr := r.counters.Refund(context.WithoutCancel(ctx), spentTakes(takes[:i], res[:i])); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, nil, err
		}
		copy(res[i:n], got)
		if slices.ContainsFunc(got, func(r limit.Result) bool { return !r.Allowed }) {
			for j := n; j < len(takes); j++ {
				res[j] = limit.Result{Allowed: true} // not counted: nothing to refund
			}
			if vol == nil {
				return res, nil, nil
			}
			return res, &guard.VolumeResult{}, nil // not counted
		}
		i = n
	}
	if vol == nil {
		return res, nil, nil
	}
	vres, err := r.velocity.TakeVolume(ctx, *vol)
	if err != nil {
		if rerr := r.counters.Refund(context.WithoutCancel(ctx), spentTakes(takes, res)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, nil, err
	}
	return res, &vres, nil
}

// clusterTrust reads the number's trust mark first, when vol carries one:
// on Cluster the limits go one slot at a time and stop at a refusal, so
// an automatic rule would refuse a trusted send before the velocity script
// could find it trusted. One more round trip, on Cluster only; the mark is
// read as every reader reads it (readMarkScript: a held mark does not
// trust yet). It returns
// the take to send (known trusted, or as it was) and whether the automatic
// takes are skipped.
func (r *sends) clusterTrust(ctx context.Context, vol *guard.VolumeTake) (*guard.VolumeTake, bool, error) {
	if vol == nil || vol.Trusted || vol.Mark.ID == "" {
		return vol, false, nil
	}
	ok, err := readMark(ctx, r.rdb, r.key(vol.Mark), vol.Now)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return vol, false, nil
	}
	v := *vol
	v.Trusted, v.Mark = true, limit.Key{}
	return &v, true, nil
}

// spentTakes are the takes whose results say they were spent, each
// naming the window it was counted in (a refund gives back only there).
func spentTakes(takes []limit.Take, res []limit.Result) []limit.Take {
	var spent []limit.Take
	for i, r := range res {
		if r.Spent {
			t := takes[i]
			t.WindowID = r.WindowID
			spent = append(spent, t)
		}
	}
	return spent
}
