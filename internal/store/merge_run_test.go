package store

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestJoinSendsRunsOnce: take_limit calls in a row that differ only in
// their field go as one run (the number of calls, the seven values they
// share, the fields): a fixed window's as tag 4 with each call's first key
// only, a bucket's as tag 3 with both; a call with other values (another
// limit, a string "1" for the number 1) starts another entry, and
// take_limits calls are never runs. Keys stay in order.
func TestJoinSendsRunsOnce(t *testing.T) {
	ctx := context.Background()
	one := func(cur, field string, kind int, limit any) *redis.Cmd {
		args := takeLimitScript.args(2, 10)
		args = append(args, cur+"c", cur+"p", kind, 0, limit, int64(60000), int64(1), int64(60000), int64(7), field)
		return redis.NewCmd(ctx, args...)
	}
	group := takeLimitsScript.args(2, 9)
	group = append(group, "gc", "gp", 1, 2, 0, int64(5), int64(10), int64(1), int64(1000), int64(3), "g")
	cmds := []*redis.Cmd{
		one("a", "fa", 1, int64(5)), one("b", "fb", 1, int64(5)), one("c", "fc", 1, int64(5)),
		one("d", "fd", 1, int64(6)), one("e", "fe", 1, "6"),
		redis.NewCmd(ctx, group...),
		one("f", "ff", 2, int64(5)), one("h", "fh", 2, int64(5)),
	}
	j := joinables[takeLimitScript.Hash()]
	call, runs := j.join(ctx, cmds, 16)
	got := call.Args()
	if !slices.Equal(runs, []int{3, 1, 1, 1, 2}) {
		t.Errorf("calls per entry %v, want [3 1 1 1 2]", runs)
	}
	want := []any{"evalsha", takeLimitsManyScript.sha, 13,
		"ac", "bc", "cc", "dc", "dp", "ec", "ep", "gc", "gp", "fc", "fp", "hc", "hp",
		"4", 3, 1, 0, int64(5), int64(60000), int64(1), int64(60000), int64(7), "fa", "fb", "fc",
		"1", 2, 1, 0, int64(6), int64(60000), int64(1), int64(60000), int64(7), "fd",
		"1", 2, 1, 0, "6", int64(60000), int64(1), int64(60000), int64(7), "fe",
		"2", 2, 1, 2, 0, int64(5), int64(10), int64(1), int64(1000), int64(3), "g",
		"3", 2, 2, 0, int64(5), int64(60000), int64(1), int64(60000), int64(7), "ff", "fh",
	}
	if !slices.Equal(got, want) {
		t.Errorf("joined call\n got %v\nwant %v", got, want)
	}
}

// TestJoinsGroupWithoutAllocating: a pipeline's lone joinable call, the
// common case at a few thousand checks a second, is grouped without an
// allocation; a second call of its family joins its group, in order.
func TestJoinsGroupWithoutAllocating(t *testing.T) {
	ctx := context.Background()
	mk := func(s hotScript, key string) *redis.Cmd {
		args := s.args(2, 10)
		args = append(args, key+"c", key+"p", 1, 0, int64(5), int64(60000), int64(1), int64(60000), int64(7), key)
		return redis.NewCmd(ctx, args...)
	}
	a, b := mk(takeLimitScript, "a"), mk(takeLimitScript, "b")
	allocs := testing.AllocsPerRun(100, func() {
		var js joins
		if !js.add(a) || js.groups() != 1 || js.group(0).lone != a {
			t.Fatal("a lone call was not grouped")
		}
	})
	if allocs != 0 {
		t.Errorf("got %.0f allocations for a lone call, want 0", allocs)
	}
	var js joins
	for _, c := range []*redis.Cmd{a, b} {
		js.add(c)
	}
	if g := js.group(0); js.groups() != 1 || !slices.Equal(g.cmds, []*redis.Cmd{a, b}) || g.keys != 4 {
		t.Errorf("got %d groups, the first of %v (%d keys), want 1 of [a b] (4 keys)", js.groups(), g.cmds, g.keys)
	}
}
