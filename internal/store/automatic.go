package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// A send's automatic windows, skipped for a trusted number in the send's
// own MULTI (lua/take_automatic.lua). The velocity script reads the
// number's mark in the same MULTI (take_volume.lua); the automatic windows
// read it too, so a marked number's send counts none of them and has
// nothing to give back: two round trips, as a new number's, not three.

// automaticScript counts the automatic windows unless KEYS[1], the trust
// mark, counts at ARGV[1] (lua/take_automatic.lua).
var automaticScript = script("take_automatic")

// automaticCall is the automatic windows of one send, counted by
// automaticScript in the send's MULTI.
type automaticCall struct {
	idx  []int // the takes it counts, by index
	keys []string
	args []any
	cmd  *redis.Cmd
}

// automaticTakes are the indexes of the takes automaticScript counts: the
// automatic counting windows of a send whose trust the store is to find
// (vol carries the mark). None otherwise: the MULTI counts them.
func automaticTakes(takes []limit.Take, vol *guard.VolumeTake) []int {
	if vol == nil || vol.Trusted || vol.Mark.ID == "" || vol.Solved != nil {
		return nil
	}
	var idx []int
	for i, t := range takes {
		if t.Automatic && t.Algorithm == limit.FixedWindow && t.Cost > 0 && !t.SpendIfAllowed && !t.Hold {
			idx = append(idx, i)
		}
	}
	return idx
}

// queueAutomatic queues automaticScript for the takes idx names, the
// mark read at now; nil when idx is empty.
func (r *sends) queueAutomatic(ctx context.Context, pipe redis.Pipeliner, takes []limit.Take, idx []int, mark limit.Key, now time.Time) *automaticCall {
	if len(idx) == 0 {
		return nil
	}
	a := &automaticCall{idx: idx, keys: make([]string, 0, len(idx)+1), args: make([]any, 0, 1+3*len(idx))}
	a.keys = append(a.keys, r.key(mark))
	a.args = append(a.args, now.Unix())
	for _, i := range idx {
		a.keys = append(a.keys, r.key(takes[i].Key))
		a.args = append(a.args, takes[i].Cost, takes[i].Window.Milliseconds(), takes[i].Slice.Milliseconds())
	}
	a.cmd = automaticScript.EvalSha(ctx, pipe, a.keys, a.args...)
	return a
}

// readAutomatic writes automaticScript's answers into res: each window's
// count (and a sliding window's slice, for its refund), or, for a trusted
// number, allowed and not spent.
func (r *sends) readAutomatic(ctx context.Context, takes []limit.Take, a *automaticCall, res []limit.Result) error {
	if isNoScript(a.cmd.Err()) { // it did not run: once more, loading it
		a.cmd = automaticScript.Run(ctx, r.rdb, a.keys, a.args...)
	}
	v, err := a.cmd.Int64Slice()
	if err != nil {
		return fmt.Errorf("store: take automatic windows: %w", err)
	}
	if len(v) == 1 && v[0] == 1 {
		for _, i := range a.idx {
			res[i] = limit.Result{Allowed: true}
		}
		return nil
	}
	if len(v) != 1+3*len(a.idx) {
		return fmt.Errorf("store: take automatic windows: script returned %d values for %d windows", len(v), len(a.idx))
	}
	for n, i := range a.idx {
		res[i] = fixedWindowResult(takes[i], v[1+3*n], time.Duration(v[2+3*n])*time.Millisecond)
		res[i].WindowID = v[3+3*n] // a sliding window's slice; 0: any
	}
	return nil
}

// withoutTakes is takes but those idx names (sorted), and the indexes of
// the ones kept.
func withoutTakes(takes []limit.Take, idx []int) ([]limit.Take, []int) {
	rest := make([]limit.Take, 0, len(takes)-len(idx))
	kept := make([]int, 0, len(takes)-len(idx))
	for i, t := range takes {
		if len(idx) > 0 && idx[0] == i {
			idx = idx[1:]
			continue
		}
		rest = append(rest, t)
		kept = append(kept, i)
	}
	return rest, kept
}
