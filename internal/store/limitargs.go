package store

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
)

// The arguments of the limits scripts (take_limit, take_limits,
// refund_limits, sync_limits) without an allocation per value. A string or
// a number above 255 put into an `any` is boxed: one allocation each, and
// a one-limit check's EVALSHA holds eight such values (its two hashes, its
// field, its limit, window or rate, slice and slice index). Here each take's
// values live in one limitVals of a slice made once per call, and the
// arguments point at them: go-redis writes a *string, *int64 or *float64
// as it writes the value (proto.Writer.WriteArg), reads a *string key for
// Redis Cluster's slot (baseCmd.stringArg), and the joined calls compare
// pointed-to values (sameValue). Nothing writes a limitVals once its
// call's arguments are built: a command given up on may still be written
// to Redis afterwards (abandon.go).

// limitVals holds one take's values for a limits script call.
type limitVals struct {
	cur, prev, field   string // its hashes (current and previous slice) and field
	limit, cost, delta int64
	window, slice, idx int64 // window in ms
	interval           float64
}

// param is the take's window (ms) or, for a token bucket, its refill
// interval (µs per token), as the scripts read it.
func (v *limitVals) param(t limit.Take) any {
	if t.Algorithm == limit.TokenBucket {
		return &v.interval
	}
	return &v.window
}

// kind is the take's algorithm as the scripts read it: 1 a fixed window,
// 2 a token bucket.
func kind(t limit.Take) int {
	if t.Algorithm == limit.TokenBucket {
		return 2
	}
	return 1
}

// limitArgs starts the arguments of one call of s over takes, for Redis's
// clock at nowMs: each take's two hashes as the call's keys, with room for
// more ARGV values, and the takes' values for the ARGV to point at. Every
// take's hashes are one string: three allocations whatever the takes.
func (r *limitHashes) limitArgs(s hotScript, takes []limit.Take, nowMs int64, more int) ([]any, []limitVals) {
	vals := make([]limitVals, len(takes))
	args := s.args(2*len(takes), 2*len(takes)+more)
	var buf [192]byte
	var endsBuf [16]int // where each hash's name ends in b
	b, ends := buf[:0], endsBuf[:0]
	for i, t := range takes {
		v := &vals[i]
		v.field = limitID(t.Key.ID)
		v.slice = sliceLen(t)
		v.idx = nowMs / v.slice
		var at int
		b, at = r.appendLimitKeys(b, t.Key.Space, v.field, v.idx)
		ends = append(ends, at, len(b))
		v.limit, v.cost, v.window = t.Limit, t.Cost, t.Window.Milliseconds()
		if t.Algorithm == limit.TokenBucket {
			v.interval = interval(t.Rate)
		}
	}
	keys, from := string(b), 0
	for i := range vals {
		v := &vals[i]
		v.cur, v.prev, from = keys[from:ends[2*i]], keys[ends[2*i]:ends[2*i+1]], ends[2*i+1]
		args = append(args, &v.cur, &v.prev)
	}
	return args, vals
}

// int64s is cmd's reply as numbers, in dst's memory when it has room
// (cmd.Int64Slice makes a slice every call).
func int64s(cmd *redis.Cmd, dst []int64) ([]int64, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	dst = dst[:0]
	for _, v := range vals {
		switch n := v.(type) {
		case int64:
			dst = append(dst, n)
		case string:
			i, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return nil, err
			}
			dst = append(dst, i)
		default:
			return nil, fmt.Errorf("redis: unexpected type=%T for Int64", v)
		}
	}
	return dst, nil
}

// keyArg is a key of a call's arguments as a string (limitArgs's are
// *string).
func keyArg(a any) string {
	if p, ok := a.(*string); ok {
		return *p
	}
	s, _ := a.(string)
	return s
}
