package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// incrCtx is incrAsync under ctx: the command and its result.
func incrCtx(ctx context.Context, rdb *redis.Client, key string) (*redis.IntCmd, chan error) {
	cmd := redis.NewIntCmd(ctx, "incr", key)
	ch := make(chan error, 1)
	go func() { ch <- rdb.Process(ctx, cmd) }()
	return cmd, ch
}

// waitStats waits until the Coalescer has sent the given pipelines.
func waitStats(t *testing.T, c *store.Coalescer, pipelines int64) {
	t.Helper()
	for i := 0; ; i++ {
		if n, _ := c.Stats(); n >= pipelines {
			return
		}
		if i == 30_000 {
			t.Fatalf("pipelines never reached %d", pipelines)
		}
		time.Sleep(time.Millisecond)
	}
}

// leaveWays are the two ways a caller leaves a coalesced command: its
// context ends, or (under a context that never does) its waiter closes
// the give-up channel (guard.GiveUp: resilience's inline wait).
var leaveWays = map[string]func() (context.Context, func()){
	"cancel": func() (context.Context, func()) { return context.WithCancel(context.Background()) },
	"give up": func() (context.Context, func()) {
		ch := make(chan struct{})
		return giveUpCtx{context.Background(), ch}, func() { close(ch) }
	},
}

// giveUpCtx carries a give-up channel (guard.GiveUp).
type giveUpCtx struct {
	context.Context
	giveUp <-chan struct{}
}

func (c giveUpCtx) Value(key any) any {
	if _, ok := key.(guard.GiveUpKey); ok {
		return c.giveUp
	}
	return c.Context.Value(key)
}

// TestCoalescedCallerLeavesTheWire: a caller whose context ends while its
// command is on the wire (the gate holds the pipeline: no reply can come)
// is answered its context's error at once; the pipeline still carries the
// command (Redis counted it) and its reply reaches nobody: the caller's
// command keeps the context's error, never the late reply.
func TestCoalescedCallerLeavesTheWire(t *testing.T) {
	for way, leave := range leaveWays {
		t.Run(way, func(t *testing.T) { testCallerLeavesTheWire(t, leave) })
	}
}

func testCallerLeavesTheWire(t *testing.T, leave func() (context.Context, func())) {
	rdb, c, g, _ := gatedCoalescer(t)
	key := redistest.Prefix() + "n"
	ctx, cancel := leave()
	cmd, done := incrCtx(ctx, rdb, key)
	within(t, g.entered, "the pipeline on the wire")
	cancel()
	if err := within(t, done, "the caller's answer while its pipeline is held"); !errors.Is(err, context.Canceled) {
		t.Fatalf("INCR: %v, want %v while its pipeline is held", err, context.Canceled)
	}
	g.open()
	waitStats(t, c, 1)
	if n, err := rdb.Get(context.Background(), key).Int64(); err != nil || n != 1 {
		t.Errorf("GET = %d, %v; want 1: the pipeline carried the command", n, err)
	}
	if !errors.Is(cmd.Err(), context.Canceled) || cmd.Val() != 0 {
		t.Errorf("the caller's command holds %d, %v: the reply reached a caller that had gone", cmd.Val(), cmd.Err())
	}
}

// TestCoalescedAbandonedWhileQueuedIsNotSent: a command whose caller gave
// up while it waited behind the pipeline on the wire is dropped unsent:
// the worker that takes it after the reply does not send it.
func TestCoalescedAbandonedWhileQueuedIsNotSent(t *testing.T) {
	for way, leave := range leaveWays {
		t.Run(way, func(t *testing.T) { testAbandonedWhileQueued(t, leave) })
	}
}

func testAbandonedWhileQueued(t *testing.T, leave func() (context.Context, func())) {
	rdb, c, g, _ := gatedCoalescer(t)
	key := redistest.Prefix() + "n"
	first := incrAsync(rdb, key)
	within(t, g.entered, "first pipeline")
	ctx, cancel := leave()
	_, second := incrCtx(ctx, rdb, key)
	waitQueued(t, c, 1)
	cancel()
	if err := within(t, second, "the queued caller's answer"); !errors.Is(err, context.Canceled) {
		t.Fatalf("queued INCR: %v, want %v", err, context.Canceled)
	}
	g.open()
	if r := within(t, first, "first reply"); r.err != nil || r.n != 1 {
		t.Fatalf("first INCR: %d, %v", r.n, r.err)
	}
	// Queued behind the abandoned command: the worker met it first.
	if n, err := rdb.Get(context.Background(), key).Int64(); err != nil || n != 1 {
		t.Errorf("GET = %d, %v; want 1: the abandoned INCR was sent", n, err)
	}
	if _, cmds := c.Stats(); cmds != 2 {
		t.Errorf("%d commands sent, want 2 (the first INCR and the GET)", cmds)
	}
}

// TestCoalescedRepliesOfEveryType: callers that may leave (a context that
// can end) get their replies through a stand-in: each type's value, a
// missing key (redis.Nil) and Redis's own error, in shared pipelines.
func TestCoalescedRepliesOfEveryType(t *testing.T) {
	srv, rdb, c, _ := coalescedClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := redistest.Prefix()
	if err := rdb.Set(ctx, p+"word", "hello", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause(200 * time.Millisecond) // the commands below share pipelines
	var wg sync.WaitGroup
	check := func(what string, ok func() bool) {
		wg.Go(func() {
			if !ok() {
				t.Errorf("%s: wrong reply", what)
			}
		})
	}
	check("EVAL", func() bool {
		v, err := rdb.Eval(ctx, "return {1, 'two'}", nil).Slice()
		return err == nil && len(v) == 2 && v[0] == int64(1) && v[1] == "two"
	})
	check("INCRBY", func() bool { n, err := rdb.IncrBy(ctx, p+"n", 5).Result(); return err == nil && n == 5 })
	check("GET", func() bool { s, err := rdb.Get(ctx, p+"word").Result(); return err == nil && s == "hello" })
	check("GET of nothing", func() bool { _, err := rdb.Get(ctx, p+"none").Result(); return errors.Is(err, redis.Nil) })
	check("SET", func() bool { s, err := rdb.Set(ctx, p+"s", "v", time.Minute).Result(); return err == nil && s == "OK" })
	check("SETNX", func() bool { ok, err := rdb.SetNX(ctx, p+"word", "x", time.Minute).Result(); return err == nil && !ok })
	check("INCR of a word", func() bool {
		var re redis.Error
		return errors.As(rdb.Incr(ctx, p+"word").Err(), &re)
	})
	wg.Wait()
	if pipelines, cmds := c.Stats(); cmds < 7 || pipelines >= cmds {
		t.Errorf("%d commands in %d pipelines: none shared one, so this proved nothing", cmds, pipelines)
	}
}

// TestTakeAbandons: only limits' and scripted takes through a running
// Coalescer say they can be abandoned; a MULTI never does, nor does
// anything without a Coalescer or after its stop.
func TestTakeAbandons(t *testing.T) {
	target := redistest.New(t)
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: target.URL, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	lim := limit.Take{Key: limit.Key{Space: "l:b", ID: "k"}, Algorithm: limit.TokenBucket, Limit: 5, Rate: 1, Cost: 1}
	bucket := lim
	bucket.Key.Name = "b" // a named counter decided by its script alone
	counting := limit.Take{Key: limit.Key{Space: "otp", ID: "k", Name: "sends"}, Algorithm: limit.FixedWindow,
		Limit: 5, Window: time.Minute, Cost: 1} // INCRBY + PEXPIRE NX in a MULTI
	st := store.NewRedis(rdb, target.Prefix)
	if st.TakeAbandons([]limit.Take{lim}) {
		t.Error("without a Coalescer: abandons")
	}
	c, stop := store.Coalesce(rdb, store.CoalesceOptions{Pipelines: 1})
	st.WithCoalescer(c)
	for _, tc := range []struct {
		what  string
		takes []limit.Take
		want  bool
	}{
		{"a limit", []limit.Take{lim, lim}, true},
		{"a scripted named counter", []limit.Take{bucket}, true},
		{"a counting window (MULTI)", []limit.Take{counting}, false},
		{"a counting window beside a bucket (MULTI)", []limit.Take{bucket, counting}, false},
	} {
		if got := st.TakeAbandons(tc.takes); got != tc.want {
			t.Errorf("%s: abandons %v, want %v", tc.what, got, tc.want)
		}
	}
	stop()
	if st.TakeAbandons([]limit.Take{lim}) {
		t.Error("after the Coalescer's stop: abandons")
	}
}

// TestLimitTakeLeavesAHeldPipeline: a /limits/check take through the
// Coalescer returns its context's error as soon as the context ends,
// while the pipeline that carries its script is held on the wire.
func TestLimitTakeLeavesAHeldPipeline(t *testing.T) {
	rdb, c, g, _ := gatedCoalescer(t)
	st := store.NewRedis(rdb, redistest.Prefix()).WithCoalescer(c)
	take := limit.Take{Key: limit.Key{Space: "l:b", ID: "k"}, Algorithm: limit.TokenBucket, Limit: 5, Rate: 1, Cost: 1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := st.Take(ctx, []limit.Take{take})
		done <- err
	}()
	within(t, g.entered, "the script's pipeline on the wire")
	cancel()
	if err := within(t, done, "Take's answer while its pipeline is held"); !errors.Is(err, context.Canceled) {
		t.Errorf("Take: %v, want %v", err, context.Canceled)
	}
}
