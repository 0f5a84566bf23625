package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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

// gate is a hook inside a Coalescer (it sees the pipelines on the wire): it
// holds the first pipeline until release is closed, and counts how many
// are on the wire at once.
type gate struct {
	entered chan int      // each pipeline's number (from 1) as it enters
	release chan struct{} // closed (open): the first pipeline goes on
	once    sync.Once

	mu                     sync.Mutex
	n, inFlight, maxFlight int
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.mu.Lock()
		g.n++
		n := g.n
		g.inFlight++
		g.maxFlight = max(g.maxFlight, g.inFlight)
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.inFlight--
			g.mu.Unlock()
		}()
		g.entered <- n
		if n == 1 {
			<-g.release
		}
		return next(ctx, cmds)
	}
}

// open lets the held pipeline go on.
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) most() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxFlight
}

// handTimer is a worker's stall timer that fires only when the test says.
type handTimer struct {
	mu    sync.Mutex
	f     func()
	armed bool
}

func (h *handTimer) Reset(time.Duration) bool { return h.set(true) }
func (h *handTimer) Stop() bool               { return h.set(false) }

func (h *handTimer) set(armed bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.armed
	h.armed = armed
	return was
}

// handTimers are a Coalescer's stall timers.
type handTimers struct {
	mu  sync.Mutex
	all []*handTimer
}

func (ts *handTimers) new(f func()) store.Timer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	h := &handTimer{f: f}
	ts.all = append(ts.all, h)
	return h
}

// fire fires the armed timers (their pipelines are out), as time would,
// and says how many there were. All are disarmed before any fires: a
// fired timer hands the wire on, and the worker that takes it arms its
// own timer, which this call must neither count nor fire.
func (ts *handTimers) fire() int {
	ts.mu.Lock()
	var armed []*handTimer
	for _, h := range ts.all {
		if h.set(false) {
			armed = append(armed, h)
		}
	}
	ts.mu.Unlock()
	for _, h := range armed {
		go h.f()
	}
	return len(armed)
}

// gatedCoalescer is a Coalescer of up to 4 pipelines whose stall timers
// fire by hand, with a gate on its pipelines.
func gatedCoalescer(t *testing.T) (*redis.Client, *store.Coalescer, *gate, *handTimers) {
	t.Helper()
	target := redistest.New(t)
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: target.URL, Timeout: 10 * time.Millisecond, MaxWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	timers := &handTimers{}
	c, stop := store.CoalesceWithTimers(rdb, store.CoalesceOptions{Pipelines: 4, Timeout: 5 * time.Second}, timers.new)
	g := &gate{entered: make(chan int, 16), release: make(chan struct{})}
	rdb.AddHook(g)
	t.Cleanup(func() { g.open(); stop(); rdb.Close() }) // a failed test may leave it held
	return rdb, c, g, timers
}

type incrResult struct {
	n   int64
	err error
}

func incrAsync(rdb *redis.Client, key string) chan incrResult {
	ch := make(chan incrResult, 1)
	go func() {
		n, err := rdb.Incr(context.Background(), key).Result()
		ch <- incrResult{n, err}
	}()
	return ch
}

// within fails the test if ch gives nothing in a long while (a bound for
// a hang, not a measured time).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

func waitQueued(t *testing.T, c *store.Coalescer, n int) {
	t.Helper()
	for i := 0; c.Queued() != n; i++ {
		if i == 30_000 {
			t.Fatalf("%d commands queued, want %d waiting behind the pipeline on the wire", c.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCoalescerOnePipelineOnTheWire: with four pipelines allowed and none
// stalled, commands that arrive while one pipeline is out wait for it,
// though three workers are free, and then go out together.
func TestCoalescerOnePipelineOnTheWire(t *testing.T) {
	rdb, c, g, _ := gatedCoalescer(t)
	key := redistest.Prefix() + "n"
	first := incrAsync(rdb, key)
	if n := within(t, g.entered, "first pipeline"); n != 1 {
		t.Fatalf("pipeline %d entered first", n)
	}
	second, third := incrAsync(rdb, key), incrAsync(rdb, key)
	waitQueued(t, c, 2)
	g.open()
	var got []int64
	for _, ch := range []chan incrResult{first, second, third} {
		r := within(t, ch, "reply")
		if r.err != nil {
			t.Fatal(r.err)
		}
		got = append(got, r.n)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("replies %v, want 1, 2 and 3 once each", got)
	}
	if pipelines, cmds := c.Stats(); pipelines != 2 || cmds != 3 {
		t.Errorf("%d commands in %d pipelines, want 3 in 2: the two that waited went together", cmds, pipelines)
	}
	if most := g.most(); most != 1 {
		t.Errorf("%d pipelines on the wire at once, want 1", most)
	}
}

// TestCoalescerStalledPipelineLetsAnotherGo: a pipeline out for longer than
// Stall (its timer fires) hands the wire on, so the commands behind it go
// out beside it and are answered while it is still held; the wire's token
// is handed on once, not again when the held pipeline's reply comes.
func TestCoalescerStalledPipelineLetsAnotherGo(t *testing.T) {
	rdb, c, g, timers := gatedCoalescer(t)
	key := redistest.Prefix() + "n"
	first := incrAsync(rdb, key)
	within(t, g.entered, "first pipeline")
	second := incrAsync(rdb, key)
	waitQueued(t, c, 1)
	if n := timers.fire(); n != 1 {
		t.Fatalf("%d stall timers armed, want 1 (the held pipeline's)", n)
	}
	if n := within(t, g.entered, "second pipeline"); n != 2 {
		t.Fatalf("pipeline %d entered, want 2", n)
	}
	if r := within(t, second, "reply to the command behind the stalled pipeline"); r.err != nil || r.n != 1 {
		t.Errorf("second INCR: %d, %v; want 1 (the held one has not run)", r.n, r.err)
	}
	select {
	case r := <-first:
		t.Fatalf("the held pipeline answered (%v) before it was released", r)
	default:
	}
	g.open()
	if r := within(t, first, "reply to the held command"); r.err != nil || r.n != 2 {
		t.Errorf("first INCR: %d, %v; want 2", r.n, r.err)
	}
	// One token: later commands still go one pipeline at a time.
	const more = 20
	var wg sync.WaitGroup
	for range more {
		wg.Go(func() {
			if err := rdb.Incr(context.Background(), key).Err(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n, err := rdb.Get(context.Background(), key).Int64(); err != nil || n != 2+more {
		t.Errorf("GET = %d, %v; want %d", n, err, 2+more)
	}
	if most := g.most(); most != 2 {
		t.Errorf("%d pipelines on the wire at once, want 2 (the held one and the one beside it)", most)
	}
}

// TestCoalescerBusyWorkerYieldsBeforeSending: a worker whose last
// pipeline carried more than one command yields once before it gathers
// (gather), and what reaches the queue meanwhile goes in the same
// pipeline; after a pipeline of one (idle) it does not yield. The yield
// here stands for a request goroutine that reaches its Redis call while
// the worker lets it run.
func TestCoalescerBusyWorkerYieldsBeforeSending(t *testing.T) {
	target := redistest.New(t)
	rdb := redistest.Client(t, target.URL)
	var yields atomic.Int32
	var during func() // what a yield lets happen, if anything
	c, stop := store.CoalesceWithYield(rdb, store.CoalesceOptions{Pipelines: 1, Timeout: 5 * time.Second}, func() {
		yields.Add(1)
		if during != nil {
			during()
		}
	})
	t.Cleanup(stop)
	g := newHoldGate()
	rdb.AddHook(g)
	key := target.Prefix + "n"
	incr := func() chan incrResult { return incrAsync(rdb, key) }
	reply := func(ch chan incrResult) {
		t.Helper()
		if r := within(t, ch, "reply"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	// A lone command (no yield: the worker has sent nothing), held on the
	// wire while two more queue behind it: they go together, and still
	// without a yield, the last pipeline having carried one.
	g.armed.Store(true)
	a := incr()
	within(t, g.entered, "held pipeline")
	b, c2 := incr(), incr()
	waitQueued(t, c, 2)
	close(g.release)
	reply(a)
	reply(b)
	reply(c2)
	if n := yields.Load(); n != 0 {
		t.Fatalf("%d yields after pipelines of one and of two commands, want 0", n)
	}
	// Busy now (the last pipeline carried two): the next lone command waits
	// for one yield, and one more that queues during it goes with it.
	queued := make(chan chan incrResult, 1)
	during = func() { // on the worker's goroutine: no t.Fatal here
		e := incr()
		for i := 0; c.Queued() != 1 && i < 30_000; i++ {
			time.Sleep(time.Millisecond)
		}
		queued <- e
	}
	d := incr()
	reply(d)
	reply(within(t, queued, "command queued during the yield"))
	during = nil
	// A lone command after that pipeline of two yields once more, finds
	// nothing, goes alone; the one after it is not busy: no yield.
	reply(incr())
	reply(incr())
	if sizes := g.pipelines(); !slices.Equal(sizes, []int{1, 2, 2, 1, 1}) {
		t.Errorf("pipelines of %v commands, want [1 2 2 1 1]", sizes)
	}
	if n := yields.Load(); n != 2 {
		t.Errorf("%d yields, want 2 (before each pipeline that followed one of two)", n)
	}
}
