package store

import (
	"context"
	"embed"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each in lua/, named by what it decides, with
// its reasoning in a comment at its top. Each one is one atomic decision
// on the keys of one hash slot, so it runs unchanged on a single node and
// on Redis Cluster; one exception, take_automatic, spans slots and runs on
// a single node only (its comment says why). Scripts are called by SHA (EVALSHA) and fall back to
// EVAL when the server lost its script cache.
//
// Times are integer microseconds from Redis TIME: one clock for every
// otpguard instance, so no instance's clock skew can mint tokens (and the
// same clock Redis expires keys by). Lua numbers are doubles, exact to
// 2^53; microseconds since 1970 stay well below that for the next two
// centuries.

//go:embed lua/*.lua
var luaFiles embed.FS

// luaScripts is the one list of the scripts: each one's file in lua/ (by
// name, without ".lua") and the library files its source follows, in
// order (a library may use the ones before it). Every script is built
// from it (script), LoadScripts preloads every one, and
// TestLuaFilesAreListed holds it and lua/ to each other.
var luaScripts = buildScripts(map[string][]string{
	"take_bucket":   bucketLibs,
	"refund_bucket": bucketLibs,
	"sync_bucket":   bucketLibs,
	"take_many":     bucketLibs,
	"take_window":   nil,
	"count_window":  nil,
	"refund_window": nil,
	"take_limit":    limitLibs,
	"take_limits":   limitLibs,
	"refund_limits": limitLibs,
	"sync_limits":   limitLibs,

	"take_limits_many": {"lib_base"}, // and lazyLibs'

	"take_volume":       nil,
	"take_solved":       nil,
	"refund_volume":     nil,
	"count_conversion":  {"lib_conversion"},
	"count_conversions": {"lib_conversion"},
	"trust_mark":        nil,
	"take_automatic":    nil,

	"save_code":           nil,
	"guess_code":          nil,
	"consume_code":        nil,
	"lock_code":           nil,
	"delete_code":         nil,
	"read_verification":   {"lib_code"},
	"cancel_verification": {"lib_code"},

	"claim_idempotency_key":   nil,
	"finish_idempotency_key":  nil,
	"release_idempotency_key": nil,

	"beat":             nil,
	"add_abuse_counts": nil,
	"note_block":       nil,
	"list_blocks":      nil,
	"end_block":        nil,
})

// The libraries of the counters' scripts: lib_base (local names for the
// functions they call, the clock), lib_take (a bucket's remaining, the
// batch decision that take_many and take_limits share), then how the
// counters are kept: a key each (lib_bucket) or fields of time-slice
// hashes (lib_limit).
var (
	bucketLibs = []string{"lib_base", "lib_take", "lib_bucket"}
	limitLibs  = []string{"lib_base", "lib_take", "lib_limit"}
)

// lazyLibs are libraries a script builds only when a call needs them: a
// script runs its libraries' definitions at every call (22k instructions
// of Redis's a call for lib_take and lib_limit, half what the joined
// script's common call spends on its own work), and the joined
// /limits/check script's common call (runs of fixed windows' hits in cur)
// needs none of theirs. Their source goes into a function whose first
// call builds them (libs(), in the script), after the script's libraries
// and before its own source, and returns the names exports lists.
var lazyLibs = map[string]struct{ libs, exports []string }{
	"take_limits_many": {libs: []string{"lib_take", "lib_limit"}, exports: []string{"settle", "take_at", "take_one", "take_group"}},
}

// luaScript is one script of luaScripts: its source (libraries first) and
// the go-redis script built from it.
type luaScript struct {
	libs   []string
	src    string
	script *redis.Script
}

// buildScripts reads every script of list (name -> libraries) from
// luaFiles. A name without its file is a programming error, found at
// start-up by every test of the package.
func buildScripts(list map[string][]string) map[string]luaScript {
	out := make(map[string]luaScript, len(list))
	for name, libs := range list {
		src := ""
		for _, lib := range libs {
			src += luaSource(lib)
		}
		if lazy, ok := lazyLibs[name]; ok {
			src += lazySource(lazy.libs, lazy.exports)
		}
		src += luaSource(name)
		out[name] = luaScript{libs: libs, src: src, script: redis.NewScript(src)}
	}
	return out
}

// lazySource is the Lua of lazyLibs: libraries built by the first call of
// libs(), which returns a table of the names in exports.
func lazySource(libs, exports []string) string {
	src := "local built\nlocal function libs()\nif built then return built end\n"
	for _, lib := range libs {
		src += luaSource(lib)
	}
	src += "built = {"
	for _, name := range exports {
		src += name + " = " + name + ", "
	}
	return src + "}\nreturn built\nend\n"
}

func luaSource(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("store: lua script %s: %v", name, err))
	}
	return string(b)
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
// and each key again, two or three allocations a call more
// (BenchmarkTakeTokenBucket, BenchmarkTakeBatch10).
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
