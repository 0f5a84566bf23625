package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// An OTP send's limits in one round trip (guard.OTP.spend). On a single
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
// must not keep (the counting rule, guard.OTP.spend).

var _ guard.SendCounter = (*Redis)(nil)

// TakeSend takes the limits of takes and, when vol is not nil, the
// velocity count, in one round trip (on Cluster one per hash slot, in
// order, stopping at a refusal).
func (r *Redis) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	if r.cluster {
		return r.takeSendCluster(ctx, takes, vol)
	}
	if vol == nil {
		res, err := r.Take(ctx, takes)
		return res, nil, err
	}
	pipe := r.rdb.TxPipeline()
	// An Idempotency-Key's claim goes first in the MULTI (sendclaim.go in
	// guard): a duplicate's limits count only after the claim's winner's.
	claim := guard.SendClaimFrom(ctx)
	var ccmd *redis.Cmd
	if claim != nil {
		ccmd = claimIdempotencyScript.EvalSha(ctx, pipe, []string{r.idempotencyKey(claim.Digest)}, claim.Body, claim.Token, claim.Pending.Milliseconds())
	}
	// The automatic windows of a send whose trust the velocity script is
	// to find go in a script that reads the mark too (automatic.go).
	autoIdx := automaticTakes(takes, vol)
	rest, kept := withoutTakes(takes, autoIdx)
	cmds, err := r.queueTakes(ctx, pipe, rest)
	if err != nil {
		return nil, nil, err
	}
	auto := r.queueAutomatic(ctx, pipe, takes, autoIdx, vol.Mark)
	vscript, vkeys, vargs := r.volumeCall(*vol)
	vcmd := vscript.EvalSha(ctx, pipe, vkeys, vargs...)
	// As in take: a NOSCRIPT or a peek's redis.Nil is one command's reply,
	// read below; any other error failed the round trip.
	_, err = pipe.Exec(ctx)
	if err != nil && !isNoScript(err) && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("store: take send: %w", err)
	}
	got, err := r.readTakes(ctx, rest, cmds)
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
	vres, err := r.volumeResult(*vol, vcmd)
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

// takeSendCluster takes the limits one slot at a time, in their order (a
// group is a run of takes in one slot: the number's cooldown and per-number
// window are one), each group one MULTI, and the velocity count last. A
// group that refuses ends the send: the groups after it are answered
// allowed and not spent (nothing to refund), and the velocity count is
// not taken.
func (r *Redis) takeSendCluster(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
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
		got, err := r.Take(ctx, takes[i:n])
		if err != nil {
			// What earlier groups counted goes back, as the caller gives
			// back nothing of a request the store failed.
			if rerr := r.Refund(context.WithoutCancel(ctx), spentTakes(takes[:i], res[:i])); rerr != nil {
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
	vres, err := r.TakeVolume(ctx, *vol)
	if err != nil {
		if rerr := r.Refund(context.WithoutCancel(ctx), spentTakes(takes, res)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, nil, err
	}
	return res, &vres, nil
}

// clusterTrust reads the number's trust mark first, when vol carries one:
// on Cluster the limits go one slot at a time and stop at a refusal, so
// an automatic rule would refuse a trusted send before the velocity script
// could find it trusted. One more round trip, on Cluster only. It returns
// the take to send (known trusted, or as it was) and whether the automatic
// takes are skipped.
func (r *Redis) clusterTrust(ctx context.Context, vol *guard.VolumeTake) (*guard.VolumeTake, bool, error) {
	if vol == nil || vol.Trusted || vol.Mark.ID == "" {
		return vol, false, nil
	}
	cmd := redis.NewIntCmd(ctx, "exists", r.key(vol.Mark))
	_ = r.rdb.Process(ctx, cmd)
	n, err := cmd.Result()
	if err != nil {
		return nil, false, fmt.Errorf("store: read trust mark: %w", err)
	}
	if n == 0 {
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

// volumeArgs are velocityScript's keys and arguments for t. Without a
// trusted tier or a mark, the keys the script does not read repeat
// KEYS[1] and KEYS[2] (one slot for all).
func (r *Redis) volumeArgs(t guard.VolumeTake) ([]string, []any) {
	ttl := int64((time.Duration(t.Lookback+2) * time.Hour) / time.Second)
	keys := []string{r.key(t.Key), r.key(t.Quarantine), "", ""}
	keys[2], keys[3] = keys[0], keys[1]
	if t.TrustedKey.ID != "" {
		keys[2] = r.key(t.TrustedKey)
	}
	hasMark := t.Mark.ID != ""
	if hasMark {
		keys[3] = r.key(t.Mark)
	}
	return keys, []any{t.Hour, t.Lookback, t.Floor, t.QFloor, t.Factor, t.HistoryMinSends, ttl, t.Now.Unix(), t.Now.Unix() / 60,
		t.MinuteShare, flag(t.Trusted), t.TFloor, t.TFactor, flag(t.NewOff), flag(hasMark),
		t.Unverified.Floor, t.Unverified.Share, t.Unverified.NormalDefault, t.Unverified.NormalMin}
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// volumeResult reads velocityScript's reply.
func (r *Redis) volumeResult(t guard.VolumeTake, cmd *redis.Cmd) (guard.VolumeResult, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return guard.VolumeResult{}, fmt.Errorf("store: take volume %s: %w", r.key(t.Key), err)
	}
	if len(v) != 7 && len(v) != 8 {
		return guard.VolumeResult{}, fmt.Errorf("store: take volume %s: script returned %d values, want 7 or 8", r.key(t.Key), len(v))
	}
	// The seventh value: the solved cap's "reused", the velocity rule's
	// "trusted"; an eighth: the unverified budget that refused.
	res := guard.VolumeResult{Allowed: v[0] == 1, Count: v[1], Limit: v[2], Baseline: v[3], Quarantined: v[4] == 1,
		MinuteLimit: v[5], Reused: t.Solved != nil && v[6] == 1, Trusted: t.Solved == nil && v[6] == 1}
	if len(v) == 8 {
		res.Unverified = v[7]
	}
	return res, nil
}
