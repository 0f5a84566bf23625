package store

import (
	"context"

	"github.com/redis/go-redis/v9"
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
func (r *Redis) DeleteCodeKeyForTest(ctx context.Context, phone string) error {
	return r.rdb.Del(ctx, r.codeKey(phone)).Err()
}

// Timer is a Coalescer worker's stall timer.
type Timer = timer

// CoalesceWithTimers is Coalesce with the workers' stall timers made by
// newTimer, for tests that fire them by hand.
func CoalesceWithTimers(rdb redis.UniversalClient, o CoalesceOptions, newTimer func(f func()) Timer) (*Coalescer, func()) {
	return coalesce(rdb, o, newTimer)
}

// Queued is how many commands wait for a pipeline.
func (c *Coalescer) Queued() int { return len(c.queue) }

// LuaFilesForTest is the embedded lua/ directory.
var LuaFilesForTest = luaFiles

// LuaScriptsForTest lists luaScripts: each script's name, its library
// (or ""), and its SHA.
func LuaScriptsForTest() (libs map[string]string, shas map[string]string) {
	libs, shas = map[string]string{}, map[string]string{}
	for name, s := range luaScripts {
		libs[name], shas[name] = s.lib, s.script.Hash()
	}
	return libs, shas
}
