package store

import (
	"context"
	"embed"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each in lua/, named by what it decides, with
// its reasoning in a comment at its top. Each file is the whole script as
// Redis runs it, so that the line of an error Redis reports is the file's.
// The code that scripts share lives in lua/lib/ and is copied into each
// script that uses it between "-- begin lib/<name>.lua" and "-- end
// lib/<name>.lua" (TestLuaLibraries holds the copies to lua/lib/, and
// rewrites them with -update).
//
// Each script is one atomic decision on the keys of one hash slot, so it
// runs unchanged on a single node and on Redis Cluster; one exception,
// take_automatic, spans slots and runs on a single node only (its comment
// says why). Scripts are called by SHA (EVALSHA) and fall back to EVAL
// when the server lost its script cache.
//
// Times are integer microseconds from Redis TIME: one clock for every
// otpguard instance, so no instance's clock skew can mint tokens (and the
// same clock Redis expires keys by). Lua numbers are doubles, exact to
// 2^53; microseconds since 1970 stay well below that for the next two
// centuries.

//go:embed lua/*.lua
var luaFiles embed.FS

// luaScripts is the one list of the scripts, by the name of their file in
// lua/ (without ".lua"). Every script is built from it (script),
// LoadScripts preloads every one, and TestLuaFilesAreListed holds it and
// lua/ to each other.
var luaScripts = buildScripts(
	"take_bucket", "refund_bucket", "sync_bucket", "take_many",
	"take_window", "count_window", "refund_window", "take_sliding", "refund_sliding",
	"take_limit", "take_limits", "refund_limits", "sync_limits", "take_limits_many",

	"take_volume", "take_solved", "read_solved_cap", "refund_volume",
	"count_conversion", "count_conversions", "trust_mark", "read_trust_mark", "take_automatic",

	"save_code", "guess_code", "consume_code", "lock_code", "delete_code",
	"read_verification", "end_verification", "read_code",

	"claim_idempotency_key", "finish_idempotency_key", "release_idempotency_key",

	"beat", "add_abuse_counts", "note_block", "list_blocks", "end_block",
)

// luaScript is one script of luaScripts: its source and the go-redis
// script built from it.
type luaScript struct {
	src    string
	script *redis.Script
}

// buildScripts reads every script of names from luaFiles. A name without
// its file is a programming error, found at start-up by every test of the
// package.
func buildScripts(names ...string) map[string]luaScript {
	out := make(map[string]luaScript, len(names))
	for _, name := range names {
		b, err := luaFiles.ReadFile("lua/" + name + ".lua")
		if err != nil {
			panic(fmt.Sprintf("store: lua script %s: %v", name, err))
		}
		out[name] = luaScript{src: string(b), script: redis.NewScript(string(b))}
	}
	return out
}

// script is the script of lua/<name>.lua, which luaScripts must list.
func script(name string) *redis.Script {
	s, ok := luaScripts[name]
	if !ok {
		panic("store: lua script " + name + " is not in luaScripts")
	}
	return s.script
}

// scriptNames is luaScripts' names in order, so that LoadScripts loads
// them in the same order every time.
func scriptNames() []string {
	names := make([]string, 0, len(luaScripts))
	for name := range luaScripts {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// tokenBucketScript takes tokens from a bucket, only when it allows
// (lua/take_bucket.lua).
var tokenBucketScript = newHotScript(script("take_bucket"))

// tokenRefundScript gives ARGV[2] tokens back to a bucket refilling one token
// every ARGV[1] microseconds (lua/refund_bucket.lua).
var tokenRefundScript = script("refund_bucket")

// windowTakeScript is a fixed-window hit that counts only when it allows
// (lua/take_window.lua).
var windowTakeScript = newHotScript(script("take_window"))

// windowRefundScript takes ARGV[1] back off a fixed-window counter, never
// below zero, never creating a key and, given the window the hit counted
// in (ARGV[2], its PEXPIRETIME), only in that window (lua/refund_window.lua).
var windowRefundScript = script("refund_window")

// windowCountScript counts a fixed-window hit allowed or not
// (lua/count_window.lua): an Envoy rule's window in one command.
var windowCountScript = newHotScript(script("count_window"))

// tokenSyncScript adds ARGV[3] tokens that an instance already spent on its
// own (sync mode) to a bucket of capacity ARGV[1] refilling one token every
// ARGV[2] microseconds, and returns {remaining, reset_after_us}
// (lua/sync_bucket.lua).
var tokenSyncScript = script("sync_bucket")

// TokenBucketScript is the token bucket script's source, for tools that
// drive Redis with it directly (cmd/otpguard-load runs redis-benchmark on
// it, by the SHA otpguard itself uses).
func TokenBucketScript() (src, sha string) {
	return luaScripts["take_bucket"].src, tokenBucketScript.Hash()
}

// hotScript is a script of the /limits/check path, run once per decision
// or batch. Its callers build the EVALSHA's arguments in one slice (args)
// and run sends it as it is: go-redis's Script.Run takes the keys and the
// arguments apart, copies them into a slice of its own and boxes the SHA
// and each key again: allocations on every call of the hot path.
type hotScript struct {
	*redis.Script
	sha any // Hash(), boxed once
}

func newHotScript(s *redis.Script) hotScript {
	return hotScript{Script: s, sha: s.Hash()}
}

// args starts the arguments of one EVALSHA of s over nkeys keys, with room
// for more (the keys, then ARGV) to be appended.
func (s hotScript) args(nkeys, more int) []any {
	args := make([]any, 3, 3+more)
	args[0], args[1], args[2] = "evalsha", s.sha, nkeys
	return args
}

// run sends args (from s.args, keys and ARGV appended) as one EVALSHA. If
// the server lost its script cache (restart, SCRIPT FLUSH) the script did
// not run, so running it again counts once: run EVALs it, which also puts
// it back in the cache, as Script.Run does.
func (s hotScript) run(ctx context.Context, rdb rediser, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // the keys follow numkeys, for Redis Cluster's routing
	_ = rdb.Process(ctx, cmd)
	if !isNoScript(cmd.Err()) {
		return cmd
	}
	keys := make([]string, args[2].(int))
	for i := range keys {
		keys[i] = keyArg(args[3+i])
	}
	return s.Eval(ctx, rdb, keys, args[3+len(keys):]...)
}
