package store

import (
	"context"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
)

// replyRediser is a fake rediser whose Process answers every script call
// with reply, keeping the arguments of the last one.
type replyRediser struct {
	rediser
	reply any // a []any, boxed once
	last  []any
}

func (f *replyRediser) Process(_ context.Context, cmd redis.Cmder) error {
	f.last = cmd.Args()
	cmd.(*redis.Cmd).SetVal(f.reply)
	return nil
}

func limitTake(id string, bucket bool) limit.Take {
	if bucket {
		return limit.Take{Key: limit.Key{Space: "l:api", ID: id}, Algorithm: limit.TokenBucket,
			Limit: 1_000_000_000, Rate: 1_000_000, Cost: 1, AllOrNothing: true}
	}
	return limit.Take{Key: limit.Key{Space: "l:wide", ID: id}, Algorithm: limit.FixedWindow,
		Limit: 1_000_000_000, Window: time.Hour, Cost: 1, SpendIfAllowed: true, AllOrNothing: true}
}

// plain is args with every pointer replaced by what it points to: the
// values Redis is sent.
func plain(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch p := a.(type) {
		case *string:
			out[i] = *p
		case *int64:
			out[i] = *p
		case *float64:
			out[i] = *p
		default:
			out[i] = a
		}
	}
	return out
}

// TestTakeLimitArguments: the arguments a one-limit check sends, pointers
// read, are the hashes, field and numbers limitRef and the script expect.
func TestTakeLimitArguments(t *testing.T) {
	f := &replyRediser{reply: []any{int64(1), int64(1), int64(7), int64(0), int64(0)}}
	r := &limitHashes{keyspace: keyspace{rdb: f, prefix: "og:"}, shards: DefaultLimitShards}
	long := strings.Repeat("k", 40) // past maxPlainID: its digest is the field
	for _, tc := range []struct {
		name   string
		take   limit.Take
		kind   int
		param  any
		cost   int64
		script hotScript
	}{
		{"window", limitTake("user:42", false), 1, int64(3_600_000), 1, takeLimitScript},
		{"bucket", limitTake("user:42", true), 2, float64(1), 1, takeLimitScript},
		{"long id", limitTake(long, false), 1, int64(3_600_000), 1, takeLimitScript},
		{"big cost", func() limit.Take { tk := limitTake("user:7", false); tk.Cost = 1_000_000; return tk }(), 1, int64(3_600_000), 1_000_000, takeLimitScript},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.take(context.Background(), []limit.Take{tc.take}); err != nil {
				t.Fatal(err)
			}
			ref := r.limitRef(tc.take, r.redisNowMs())
			want := []any{"evalsha", tc.script.Hash(), 2, ref.cur, ref.prev,
				tc.kind, 0, tc.take.Limit, tc.param, tc.cost, ref.slice, ref.idx, ref.field}
			if got := plain(f.last); !slices.Equal(got, want) {
				t.Errorf("arguments\n got %v\nwant %v", got, want)
			}
		})
	}
}

// TestTakeLimitAllocations holds the store's own work for one check (the
// EVALSHA's arguments, the command, the reply read into results) to a
// count of allocations: at 10,000 checks a second each one is collector
// work. Boxed one by one, the arguments alone were about ten (issue 26).
func TestTakeLimitAllocations(t *testing.T) {
	f := &replyRediser{reply: []any{int64(1), int64(1), int64(7), int64(0), int64(0)}}
	r := &limitHashes{keyspace: keyspace{rdb: f, prefix: "og:"}, shards: DefaultLimitShards}
	ctx := context.Background()
	takes := []limit.Take{limitTake("user:42", false)}
	allocs := testing.AllocsPerRun(200, func() {
		res, err := r.take(ctx, takes)
		if err != nil || len(res) != 1 || !res[0].Allowed || res[0].Count != 7 {
			t.Fatalf("takeLimits: %+v, %v", res, err)
		}
	})
	// the takes' values, the arguments, the hashes' names, the command,
	// the results
	const want = 5
	if allocs > want {
		t.Errorf("got %.0f allocations per check, want at most %d", allocs, want)
	}
	t.Logf("%.0f allocations per check", allocs)
}

// TestJoinedRunsFromLimitArgs: one policy's checks, built as takeLimits
// builds them (pointers into their values), still go as one run: runs
// compare what the arguments point to.
func TestJoinedRunsFromLimitArgs(t *testing.T) {
	f := &replyRediser{reply: []any{int64(1), int64(1), int64(7), int64(0), int64(0)}}
	r := &limitHashes{keyspace: keyspace{rdb: f, prefix: "og:"}, shards: DefaultLimitShards}
	ctx := context.Background()
	var cmds []*redis.Cmd
	for _, id := range []string{"user:1", "user:2", "user:3"} {
		if _, err := r.take(ctx, []limit.Take{limitTake(id, false)}); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, redis.NewCmd(ctx, f.last...))
	}
	other := limitTake("user:4", false)
	other.Limit = 5
	if _, err := r.take(ctx, []limit.Take{other}); err != nil {
		t.Fatal(err)
	}
	cmds = append(cmds, redis.NewCmd(ctx, f.last...))
	_, runs := joinables[takeLimitScript.Hash()].join(ctx, cmds, 8)
	if !slices.Equal(runs, []int{3, 1}) {
		t.Errorf("calls per entry %v, want [3 1]", runs)
	}
}

// TestShardOfIsCRC32: the shard of a field is still crc32 (IEEE) of it
// modulo the shards: another function would move every limit.
func TestShardOfIsCRC32(t *testing.T) {
	for _, field := range []string{"", "a", "user:42", "#AbCdEfGhIjKlMnOp", strings.Repeat("z", 32), "é€"} {
		for _, n := range []uint32{1, 7, DefaultLimitShards} {
			if got, want := shardOf(field, n), crc32.ChecksumIEEE([]byte(field))%n; got != want {
				t.Errorf("shardOf(%q, %d) = %d, want %d", field, n, got, want)
			}
		}
	}
}
