package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// The solved tier's cap (guard/challenge.go) goes where the velocity
// rule's count goes (a guard.VolumeTake with Solved set): in the send's
// round trip on a single Redis, last on Cluster, refunded by the velocity
// rule's refund script (it counts "s:<hour>" fields the same way).

var solvedScript = script("take_solved")

// solvedTTL is how long a country's solved counts outlive their last
// write: the hour under way matters, and a refund an hour late.
const solvedTTL = 2 * time.Hour

// volumeCall is the script, keys and arguments of a VolumeTake: the
// velocity rule's, or the solved cap's.
func (r *Velocity) volumeCall(t guard.VolumeTake) (*redis.Script, []string, []any) {
	if t.Solved == nil {
		keys, args := r.volumeArgs(t)
		return velocityScript, keys, args
	}
	keys := []string{r.key(t.Key), r.key(t.Quarantine), r.key(t.Solved.Base), r.key(t.Solved.Used)}
	args := []any{t.Hour, t.Lookback, t.Floor, int64(solvedTTL / time.Second), t.Now.Unix(),
		max(1, t.Solved.TTL.Milliseconds()), t.Unverified.NormalDefault, t.Unverified.NormalMin}
	// The places below are each sent when it or one after it is in use;
	// one not in use repeats KEYS[1], its arguments 0 (off).
	vouched := t.Solved.Vouched
	uncut := t.Solved.Uncut || vouched != nil
	// The carrier's share of the cap (KEYS[5..8], ARGV[9..11];
	// guard/carriershare.go): its solved counts, its cut, its velocity
	// counts, whose share it reads, and when the country's carriers were
	// first counted.
	read := r.readsRisk(t)
	if c := t.Carrier; c.FloorShare > 0 {
		keys = append(keys, r.key(c.Key), r.key(c.Cut), r.key(c.Share), r.key(c.Since))
		args = append(args, c.FloorShare, t.HistoryMinSends, int64((time.Duration(t.Lookback+2)*time.Hour)/time.Second))
	} else if read || uncut {
		keys = append(keys, keys[0], keys[0], keys[0], keys[0])
		args = append(args, 0, 0, 0)
	}
	// The number's cached risk answer, read with the count (KEYS[9],
	// ARGV[12]) where it may be (readsRisk).
	if read {
		keys = append(keys, r.key(t.Risk))
		args = append(args, 1)
	} else if uncut {
		keys = append(keys, keys[0])
		args = append(args, 0)
	}
	// ARGV[13]: the cap without its cuts (guard/vouched.go).
	if uncut {
		args = append(args, flag(t.Solved.Uncut))
	}
	// The vouched tier's place, tried first (KEYS[10], ARGV[14..16];
	// guard/vouchedplace.go): its counts, its cap, its lookback and its
	// counts' TTL, the velocity rule's (volumeArgs).
	if vouched != nil {
		keys = append(keys, r.key(vouched.Key))
		args = append(args, max(1, vouched.Floor), vouched.Lookback, int64((time.Duration(vouched.Lookback+2)*time.Hour)/time.Second))
	}
	return solvedScript, keys, args
}

// readSolvedCapScript reads the solved cap in force of one take, writing
// nothing: lib/solved.lua's figures, take_solved's own
// (lua/read_solved_cap.lua).
var readSolvedCapScript = script("read_solved_cap")

// ReadSolvedCaps reads the solved cap in force of each take
// (guard.SolvedCapTake; its carrier's share when it names one), for the
// attack view's rows: one script call each, in one pipeline (on Cluster,
// one per node).
func (r *AbuseCounters) ReadSolvedCaps(ctx context.Context, takes []guard.VolumeTake) ([]ops.SolvedCap, error) {
	if len(takes) == 0 {
		return nil, nil
	}
	pipe, err := r.pipeline()
	if err != nil {
		return nil, err
	}
	type call struct {
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	calls := make([]call, len(takes))
	for i, t := range takes {
		c := &calls[i]
		c.keys, c.args = r.solvedCapArgs(t)
		c.cmd = readSolvedCapScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	// Each reply is read below: a NOSCRIPT is one command's answer.
	if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
		return nil, fmt.Errorf("store: read solved caps: %w", err)
	}
	out := make([]ops.SolvedCap, len(takes))
	for i, c := range calls {
		cmd := c.cmd
		if isNoScript(cmd.Err()) { // the server lost its script cache: read again
			cmd = readSolvedCapScript.Run(ctx, r.rdb, c.keys, c.args...)
		}
		v, err := cmd.Int64Slice()
		switch {
		case err != nil:
			return nil, fmt.Errorf("store: read solved cap %s: %w", c.keys[0], err)
		case len(v) != 5:
			return nil, fmt.Errorf("store: read solved cap %s: script returned %d values, want 5", c.keys[0], len(v))
		}
		out[i] = ops.SolvedCap{Limit: v[0], Used: v[1], Full: v[2] == 1, Cut: v[3] == 1}
	}
	return out, nil
}

// solvedCapArgs are readSolvedCapScript's keys and arguments for t: those
// of take_solved (volumeCall) that the cap reads.
func (r *AbuseCounters) solvedCapArgs(t guard.VolumeTake) ([]string, []any) {
	keys := []string{r.key(t.Key), r.key(t.Quarantine), r.key(t.Solved.Base)}
	args := []any{t.Hour, t.Lookback, t.Floor, t.Now.Unix(), t.Unverified.NormalDefault, t.Unverified.NormalMin}
	if c := t.Carrier; c.FloorShare > 0 {
		keys = append(keys, r.key(c.Key), r.key(c.Cut), r.key(c.Share), r.key(c.Since))
		args = append(args, c.FloorShare, t.HistoryMinSends)
	}
	return keys, args
}
