package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
)

// Sliding windows (limit.Take.Slice: the cold room's day, guard/coldroom.go):
// one hash per window, a field per slice of Redis's clock, the count the
// sum of the slices the window covers (lua/lib/sliding.lua). A hit is one
// script, in the send's MULTI like a fixed window's INCRBY + PEXPIRE NX,
// or in take_automatic with the other automatic windows; it counts every
// hit, and a refund gives back in the hit's slice only.

// slidingScript counts one hit of a sliding window (lua/take_sliding.lua).
var slidingScript = script("take_sliding")

// slidingRefundScript gives a hit back to its slice, never creating one
// (lua/refund_sliding.lua).
var slidingRefundScript = script("refund_sliding")

// slidingArgs are slidingScript's arguments for t: cost, window and slice
// in ms.
func slidingArgs(t limit.Take) []any {
	return []any{t.Cost, t.Window.Milliseconds(), t.Slice.Milliseconds()}
}

// slidingResult reads slidingScript's reply: the window's count after the
// hit, decided against t's limit; until the oldest counted slice leaves
// the window as its retry and reset; the hit's slice as its window.
func (r *Counters) slidingResult(ctx context.Context, t limit.Take, cmd *redis.Cmd) (limit.Result, error) {
	if isNoScript(cmd.Err()) { // it did not run: once more, loading it
		cmd = slidingScript.Run(ctx, r.rdb, []string{r.key(t.Key)}, slidingArgs(t)...)
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return limit.Result{}, err
	}
	if len(v) != 3 {
		return limit.Result{}, fmt.Errorf("sliding window script returned %d values, want 3", len(v))
	}
	res := fixedWindowResult(t, v[0], time.Duration(v[1])*time.Millisecond)
	res.WindowID = v[2]
	return res, nil
}
