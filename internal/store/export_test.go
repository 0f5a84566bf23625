package store

import (
	"context"
	"runtime"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// The single-check scripts, for tests that call them the way the store
// did before (inside a MULTI) to compare what Redis spends.
var (
	TokenBucketScriptForTest = tokenBucketScript
	WindowTakeScriptForTest  = windowTakeScript
)

// Interval is interval, for tests that build script arguments.
var Interval = interval

// DeleteCodeKeyForTest deletes the number's code and nothing else, as its
// TTL running out does.
func (r *Codes) DeleteCodeKeyForTest(ctx context.Context, phone string) error {
	return r.rdb.Del(ctx, r.codeKey(phone, guard.DefaultService)).Err()
}

// Timer is a Coalescer worker's stall timer.
type Timer = timer

// CoalesceWithTimers is Coalesce with the workers' stall timers made by
// newTimer, for tests that fire them by hand.
func CoalesceWithTimers(rdb redis.UniversalClient, o CoalesceOptions, newTimer func(f func()) Timer) (*Coalescer, func()) {
	return coalesce(rdb, o, newTimer, runtime.Gosched)
}

// CoalesceWithYield is Coalesce with the busy workers' yield (gather) done
// by yield, for tests that run something in it.
func CoalesceWithYield(rdb redis.UniversalClient, o CoalesceOptions, yield func()) (*Coalescer, func()) {
	return coalesce(rdb, o, stallTimer, yield)
}

// Queued is how many commands wait for a pipeline.
func (c *Coalescer) Queued() int { return len(c.queue) }

// LuaFilesForTest is the embedded lua/ directory.
var LuaFilesForTest = luaFiles

// LuaScriptsForTest lists luaScripts: each script's name and its SHA.
func LuaScriptsForTest() (shas map[string]string) {
	shas = map[string]string{}
	for name, s := range luaScripts {
		shas[name] = s.script.Hash()
	}
	return shas
}

// LimitTagForTest is the hash tag of k's limit hashes (k a limit).
func (r *Counters) LimitTagForTest(k limit.Key) string { return r.limits.tag(k) }

// LimitHashesForTest names t's limit hashes (current and previous slice)
// and its field, as the store would now.
func (r *Counters) LimitHashesForTest(t limit.Take) (cur, prev, field string) {
	ref := r.limits.limitRef(t, r.limits.redisNowMs())
	return ref.cur, ref.prev, ref.field
}

// SetSkewForTest sets what the store believes Redis's clock is ahead of
// this host's, in ms.
func (r *Counters) SetSkewForTest(ms int64) { r.limits.skew.Store(ms) }

// SetClockForTest makes now the store's idea of this host's clock (ms),
// with no skew: a test that drives miniredis's clock names its slices.
func (r *Counters) SetClockForTest(now func() int64) {
	r.limits.clock = now
	r.limits.skew.Store(0)
}

// SliceLenForTest is t's slice length in ms (t a limit).
func SliceLenForTest(t limit.Take) int64 { return sliceLen(t) }

// JoinsOnForTest reports whether a Coalescer joins script calls on rdb.
func JoinsOnForTest(rdb redis.UniversalClient) bool { return joinsOn(rdb) }

// SaveCodeScriptForTest is the code's save script, for a test that calls
// it the way the store did before (inside a MULTI with the id's SET).
var SaveCodeScriptForTest = saveCodeScript.Script

// LuaSourceForTest is the source of the script of lua/<name>.lua, as
// Redis runs it.
func LuaSourceForTest(name string) string { return luaScripts[name].src }

// WindowReplyForTest is windowReply: a window run's two values for a call
// made take_limit's five.
var WindowReplyForTest = windowReply
