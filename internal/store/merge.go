package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Joined script calls. A script call costs Redis a fixed part beyond its
// commands (the script's lookup, the KEYS and ARGV tables, the reply's
// conversion): on a one-limit /limits/check it is most of the call. The
// Coalescer already sends concurrent requests' calls in one pipeline; a
// joinable family of scripts goes further: the calls of its scripts in one
// pipeline are sent as ONE call of its joining script, which runs each call
// as its own script would, in order, and returns one reply per call, which
// is handed to each call's command as if it had run alone.
//
// What is shared with a joining script is this convention, not any
// script's arguments: its ARGV holds, per call, the call's tag (which of
// the family's scripts it is), its number of keys and its own ARGV; its
// KEYS are the calls' keys one after another; its reply is an array of
// the calls' replies (an error reply for a call that failed). The
// Coalescer only asks a family to join the commands it knows and to split
// the reply.
//
// Joining is for a single Redis (or Sentinel's master) only: on Redis
// Cluster the calls of different requests have keys in different slots.

// maxJoinKeys bounds the keys of one joined call (CoalesceOptions.MaxBatch
// bounds its calls): a joined call holds Redis as long as its calls do
// together, and the cap keeps it about as long as 128 one-limit checks.
const maxJoinKeys = 256

// joinsOn reports whether calls are joined on rdb: only on a client of one
// server (a single Redis, or Sentinel's master: *redis.Client), never on a
// client that spreads keys over servers (Cluster, Ring), where one call
// would go to the server of its first key.
func joinsOn(rdb redis.UniversalClient) bool {
	_, one := rdb.(*redis.Client)
	return one
}

// joinable is a family of scripts whose calls are joined into one call of
// into; tags names each member (by SHA) in into's ARGV.
type joinable struct {
	into hotScript
	tags map[string]string
	// runs maps a member's tag to how its calls in a row are sent as one
	// run (join), for members whose calls differ most often only in their
	// last value.
	runs map[string]runForm
}

// runForm says how a run of a member's calls goes (join), from its first
// call's arguments (as hotScript.args builds them): the run's tag in
// into's ARGV, and how many of each call's keys it sends, its first ones
// (into names the others itself).
type runForm func(args []any) (tag string, keys int)

// joinables are the families, by the SHA of each member script.
var joinables = map[string]*joinable{}

// joinCalls makes scripts (by tag) a family joined by into, whose calls in
// a row go as runs as runs says (joinable.runs).
func joinCalls(into hotScript, scripts map[string]hotScript, runs map[string]runForm) *joinable {
	j := &joinable{into: into, tags: make(map[string]string, len(scripts)), runs: runs}
	for tag, s := range scripts {
		j.tags[s.Hash()] = tag
		joinables[s.Hash()] = j
	}
	return j
}

// joinableCall returns cmd's family and its number of keys if cmd is an
// EVALSHA of a member script as hotScript.args builds it, else nil.
func joinableCall(cmd redis.Cmder) (*joinable, *redis.Cmd, int) {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return nil, nil, 0
	}
	args := c.Args()
	if len(args) < 3 || args[0] != "evalsha" {
		return nil, nil, 0
	}
	sha, _ := args[1].(string)
	j := joinables[sha]
	nkeys, ok := args[2].(int)
	if j == nil || !ok || nkeys < 0 || len(args) < 3+nkeys {
		return nil, nil, 0
	}
	return j, c, nkeys
}

// joins gathers one pipeline's joinable calls by family, each group up to
// maxJoinKeys keys. Its first groups, and a group's lone call, need no
// allocation: at a few thousand checks a second most pipelines carry one
// call of one family, for which slices of its own would cost two
// allocations.
type joins struct {
	first [2]joinGroup
	n     int         // groups in first
	more  []joinGroup // the groups after them
}

type joinGroup struct {
	j     *joinable
	lone  *redis.Cmd   // its call while it has one
	cmds  []*redis.Cmd // its calls once it has two or more
	keys  int
	call  *redis.Cmd // the joined call, when there are two or more
	runs  []int      // calls per entry of call (join)
	alone bool       // one call: sent as it is
}

// groups is the number of groups.
func (js *joins) groups() int { return js.n + len(js.more) }

// group is group i.
func (js *joins) group(i int) *joinGroup {
	if i < len(js.first) {
		return &js.first[i]
	}
	return &js.more[i-len(js.first)]
}

// add takes cmd into a group if it is a joinable call, and reports whether
// it did.
func (js *joins) add(cmd redis.Cmder) bool {
	j, c, nkeys := joinableCall(cmd)
	if j == nil {
		return false
	}
	for i := range js.groups() {
		g := js.group(i)
		if g.j == j && g.keys+nkeys <= maxJoinKeys {
			if g.cmds == nil {
				g.cmds = append(make([]*redis.Cmd, 0, 4), g.lone)
			}
			g.cmds, g.keys = append(g.cmds, c), g.keys+nkeys
			return true
		}
	}
	g := joinGroup{j: j, lone: c, keys: nkeys}
	if js.n < len(js.first) {
		js.first[js.n] = g
		js.n++
	} else {
		js.more = append(js.more, g)
	}
	return true
}

// queue puts each group on pipe: a lone call as it is, two or more as one
// joined call.
func (js *joins) queue(ctx context.Context, pipe redis.Pipeliner) {
	for i := range js.groups() {
		g := js.group(i)
		if g.cmds == nil {
			g.alone = true
			_ = pipe.Process(ctx, g.lone)
			continue
		}
		g.call, g.runs = g.j.join(ctx, g.cmds, g.keys)
		_ = pipe.Process(ctx, g.call)
	}
}

// split hands each joined call's reply out to its calls' commands, once
// the pipeline is back. If Redis lost the joining script (a restart, SCRIPT
// FLUSH) nothing ran: every call gets NOSCRIPT, which its caller answers by
// EVAL of its own script (hotScript.run), and the joining script is loaded
// again for the next pipeline.
func (js *joins) split(ctx context.Context, rdb redis.Scripter) {
	for i := range js.groups() {
		g := js.group(i)
		if g.alone {
			continue
		}
		if err := g.call.Err(); isNoScript(err) {
			_ = g.j.into.Load(ctx, rdb).Err() // if this fails too, the next pipeline tries again
		}
		g.j.split(g.call, g.cmds, g.runs)
	}
}

// join builds one call of j.into doing the work of cmds, in order. Calls
// of a member with a run form (runs) that follow one another with the same
// number of keys and the same ARGV but the last value go as one entry: the
// run's tag, the number of calls, the ARGV they share, then each call's
// last value; and of each call's keys, the run's first ones. It returns
// the call and the calls per entry (1, or a run's). nkeys is cmds' keys in
// all, an upper bound of the keys sent.
func (j *joinable) join(ctx context.Context, cmds []*redis.Cmd, nkeys int) (*redis.Cmd, []int) {
	more := nkeys
	for _, c := range cmds {
		more += len(c.Args()) - 1 // - evalsha, sha, numkeys + tag, numkeys
	}
	args := j.into.args(0, more)
	var runs []int
	for i := 0; i < len(cmds); {
		m := 1
		if _, ok := j.runs[j.tags[cmds[i].Args()[1].(string)]]; ok {
			for i+m < len(cmds) && sameButLast(cmds[i].Args(), cmds[i+m].Args()) {
				m++
			}
		}
		runs = append(runs, m)
		i += m
	}
	at, sent := 0, 0 // the keys, then each entry's ARGV
	for _, m := range runs {
		_, keys := j.entry(cmds[at], m)
		for _, c := range cmds[at : at+m] {
			args = append(args, c.Args()[3:3+keys]...)
		}
		at, sent = at+m, sent+m*keys
	}
	args[2] = sent
	at = 0
	for _, m := range runs {
		a := cmds[at].Args()
		n := a[2].(int)
		tag, _ := j.entry(cmds[at], m)
		if m == 1 {
			args = append(args, tag, n)
			args = append(args, a[3+n:]...)
		} else {
			args = append(args, tag, m)
			args = append(args, a[3+n:len(a)-1]...)
			for _, c := range cmds[at : at+m] {
				args = append(args, c.Args()[len(a)-1])
			}
		}
		at += m
	}
	call := redis.NewCmd(ctx, args...)
	call.SetFirstKeyPos(3)
	return call, runs
}

// entry is the tag of an entry of m calls from first (a run's, or first's
// own) and how many of each call's keys it sends.
func (j *joinable) entry(first *redis.Cmd, m int) (tag string, keys int) {
	a := first.Args()
	tag = j.tags[a[1].(string)]
	if m == 1 {
		return tag, a[2].(int)
	}
	return j.runs[tag](a)
}

// sameButLast reports whether two EVALSHA calls (args as hotScript.args
// builds them) are of one script, with as many keys and the same ARGV but
// the last value. Values are compared as they are (strings and numbers):
// 1 and "1" differ, and a run only ever takes equal values.
func sameButLast(a, b []any) bool {
	if len(a) != len(b) || a[1] != b[1] || a[2] != b[2] {
		return false
	}
	n := a[2].(int)
	for i := 3 + n; i < len(a)-1; i++ {
		if !sameValue(a[i], b[i]) {
			return false
		}
	}
	return true
}

// sameValue is a == b for the scalar values of a script's arguments, and
// false for anything else (== would panic on a slice). A pointer
// (limitArgs) is compared by what it points to, never with a value: 1 and
// "1" differ, and so do 1 and a pointer to 1.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case string, int, int64, float64, uint32, uint64, bool:
		return a == b
	case *string:
		b, ok := b.(*string)
		return ok && a != nil && b != nil && *a == *b
	case *int64:
		b, ok := b.(*int64)
		return ok && a != nil && b != nil && *a == *b
	case *float64:
		b, ok := b.(*float64)
		return ok && a != nil && b != nil && *a == *b
	}
	return false
}

// split hands each of cmds its reply from call's: its own value or error,
// or call's error if call failed as a whole. runs is the calls per entry
// (join): a run's entry holds its calls' replies of five values one after
// another (a failed call's error first), or the three of a stale slice
// once, for every call of the run.
func (j *joinable) split(call *redis.Cmd, cmds []*redis.Cmd, runs []int) {
	v, err := call.Result()
	replies, ok := v.([]any)
	if err == nil && (!ok || len(replies) != len(runs)) {
		err = fmt.Errorf("store: joined script call returned %T of %d replies for %d entries", v, len(replies), len(runs))
	}
	if err != nil {
		for _, c := range cmds {
			c.SetErr(err)
		}
		return
	}
	at := 0
	for i, m := range runs {
		if m == 1 {
			setReply(cmds[at], replies[i])
		} else {
			splitRun(cmds[at:at+m], replies[i])
		}
		at += m
	}
}

// setReply hands c its reply: a value, or an error.
func setReply(c *redis.Cmd, reply any) {
	if e, isErr := reply.(error); isErr {
		c.SetErr(e)
		return
	}
	c.SetVal(reply)
}

// splitRun hands each of a run's cmds its five values of reply (or the
// error in their place), or every one the reply of a stale slice. A fixed
// window's run replies two values per call (take_limits_many's
// window_run), which become the five of take_limit.
func splitRun(cmds []*redis.Cmd, reply any) {
	vals, ok := reply.([]any)
	switch {
	case ok && len(vals) == 3:
		for _, c := range cmds {
			c.SetVal(vals)
		}
	case ok && len(vals) == 5*len(cmds):
		for i, c := range cmds {
			if e, isErr := vals[5*i].(error); isErr {
				c.SetErr(e)
				continue
			}
			c.SetVal(vals[5*i : 5*i+5 : 5*i+5])
		}
	case ok && len(vals) == 2*len(cmds):
		five := make([]any, 5*len(cmds))
		for i, c := range cmds {
			r := five[5*i : 5*i+5 : 5*i+5]
			if err := windowReply(vals[2*i], vals[2*i+1], r); err != nil {
				c.SetErr(err)
				continue
			}
			c.SetVal(r)
		}
	default:
		err := fmt.Errorf("store: joined script call returned %T of %d values for a run of %d calls", reply, len(vals), len(cmds))
		if e, isErr := reply.(error); isErr {
			err = e
		}
		for _, c := range cmds {
			c.SetErr(err)
		}
	}
}

// windowReply fills five, take_limit's reply (allowed, spent, count, left
// ms, 0), from a window run's two values for one call: its count (or its
// error) and (left + 2) * 4 + spent * 2 + allowed.
func windowReply(count, code any, five []any) error {
	if e, isErr := count.(error); isErr {
		return e
	}
	n, ok := code.(int64)
	if _, isInt := count.(int64); !isInt || !ok {
		return fmt.Errorf("store: joined script call returned %T, %T for a window's check", count, code)
	}
	five[0], five[1], five[2], five[3], five[4] = n&1, n>>1&1, count, n>>2-2, int64(0)
	return nil
}
