package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// coalescedClient is a client as otpguard builds it, with a Coalescer of
// one pipeline on the wire, on a private Redis the test may pause.
func coalescedClient(t *testing.T) (*redistest.Server, *redis.Client, *store.Coalescer, *redistest.RoundTrips) {
	t.Helper()
	srv := redistest.Start(t)
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: srv.URL(), Timeout: 10 * time.Millisecond, MaxWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	c, stop := store.Coalesce(rdb, store.CoalesceOptions{Pipelines: 1, Timeout: 5 * time.Second})
	rt := &redistest.RoundTrips{}
	rdb.AddHook(rt) // inside the Coalescer: it sees the pipelines on the wire
	t.Cleanup(func() { stop(); rdb.Close() })
	return srv, rdb, c, rt
}

// TestCoalescedCommandsShareRoundTrips: commands of concurrent callers that
// wait while a pipeline is on the wire go out together in the next one,
// and each caller gets its own reply (50 INCRs of one key: every count
// from 1 to 50 exactly once).
func TestCoalescedCommandsShareRoundTrips(t *testing.T) {
	srv, rdb, c, rt := coalescedClient(t)
	key := redistest.Prefix() + "n"
	srv.Pause(300 * time.Millisecond) // the first pipeline waits; the rest queue behind it

	const callers = 50
	got := make([]int64, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { got[i], errs[i] = rdb.Incr(context.Background(), key).Result() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	slices.Sort(got)
	for i, n := range got {
		if n != int64(i+1) {
			t.Fatalf("replies %v, want each of 1..%d once", got, callers)
		}
	}
	pipelines, cmds := c.Stats()
	if cmds != callers || pipelines > 3 || rt.N() != pipelines {
		t.Errorf("%d commands in %d pipelines (%d round trips), want %d commands in at most 3: they waited together", cmds, pipelines, rt.N(), callers)
	}
}

// TestCoalescedFailureIsOnlyItsOwn: in a shared pipeline, a command that
// fails (INCR of a key that is not a number) fails its caller alone.
func TestCoalescedFailureIsOnlyItsOwn(t *testing.T) {
	srv, rdb, c, _ := coalescedClient(t)
	ctx := context.Background()
	prefix := redistest.Prefix()
	if err := rdb.Set(ctx, prefix+"word", "hello", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause(300 * time.Millisecond)
	const callers = 20
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		key := fmt.Sprintf("%sn%d", prefix, i)
		if i == 7 {
			key = prefix + "word"
		}
		wg.Go(func() { errs[i] = rdb.Incr(ctx, key).Err() })
	}
	wg.Wait()
	for i, err := range errs {
		if i == 7 {
			var re redis.Error
			if !errors.As(err, &re) {
				t.Errorf("caller 7 (INCR of a string): %v, want Redis's error", err)
			}
		} else if err != nil {
			t.Errorf("caller %d: %v, want its own success: another command's failure is not its", i, err)
		}
	}
	if pipelines, _ := c.Stats(); pipelines >= callers {
		t.Errorf("%d pipelines for %d callers: they did not share any, so this proved nothing", pipelines, callers)
	}
}

// TestCoalescedEndedContextIsNotSent: a command whose context has already
// ended is answered at once with the context's error and never sent, even
// with room in the queue.
func TestCoalescedEndedContextIsNotSent(t *testing.T) {
	_, rdb, c, _ := coalescedClient(t)
	key := redistest.Prefix() + "n"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 { // a select between room and Done would send some
		if err := rdb.Incr(ctx, key).Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("INCR %d with an ended context: %v, want %v", i, err, context.Canceled)
		}
	}
	if _, cmds := c.Stats(); cmds != 0 {
		t.Errorf("%d commands sent, want none", cmds)
	}
	if n, err := rdb.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s = %d, %v: want 0, the INCRs never ran", key, n, err)
	}
}
