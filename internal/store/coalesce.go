package store

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
)

// Coalescer sends the single commands of concurrent requests to Redis
// together: whatever commands are waiting when a connection is free go out
// in one pipeline, one write and one read for many requests, instead of a
// write and a read each. On a saturated host that is most of otpguard's CPU
// per decision (syscalls), and Redis reads many commands per event too.
//
// Each command stays what it was: a script call is atomic on its own, and a
// command's reply or error is its own (a pipeline does not stop at a failed
// command). One exception, on a single Redis: the calls of a joinable
// family of scripts (the /limits/check scripts) go as one call of its
// joining script, which runs each as it would have run, in order, and
// answers each on its own (merge.go). Transactions (MULTI/EXEC, the OTP
// send counters) are not coalesced: they go out on a connection of their
// own.
//
// A caller whose context ends is answered ctx.Err() at once, unlike
// go-redis's own calls, which wait for the reply (or the deadline) once
// sent: a command still queued is then dropped unsent, one on the wire
// goes on and its reply is dropped (abandon.go). So the Fallback waits for
// a coalesced decision on the caller's goroutine and ends it by cancelling
// its context (Abandons, Counters.TakeAbandons).
//
// One pipeline has the wire at a time: the commands that arrive while it is
// out wait and go together in the next, so the busier otpguard is, the more
// commands share a write (and Redis reads them in one event). Only a
// pipeline out for longer than Stall lets another go, up to Pipelines at
// once, so that a slow or lost reply does not hold up every decision of
// the instance.
//
// It is a go-redis hook: added to a client (Coalesce), it stands in for the
// client's own write of each single command.
type Coalescer struct {
	rdb      redis.UniversalClient
	base     context.Context // of every pipeline: marked coalescedKey
	queue    chan *coalesced
	pending  sync.Pool // *coalesced of answered commands, with their channels
	maxBatch int
	timeout  time.Duration
	// lead is the wire's token: a worker holds it from taking a batch until
	// its pipeline's reply is in or it has been out for stall.
	lead  chan struct{}
	stall time.Duration
	// newTimer makes a worker's stall timer, which runs f when it fires:
	// stallTimer's, tests replace it.
	newTimer func(f func()) timer
	// yield lets other goroutines run before a busy worker gathers its
	// batch (gather): runtime.Gosched, tests replace it.
	yield func()
	stop  chan struct{}
	done  sync.WaitGroup
	// closing is held (read) while a command is queued, and (write) by
	// stop: once closed is set, nothing more is queued, and run answers
	// all that was.
	closing sync.RWMutex
	closed  bool
	running atomic.Bool // until stop: Abandons

	mu      sync.Mutex
	batches int64
	cmds    int64
}

type coalesced struct {
	cmd  redis.Cmder   // what the pipeline carries: the caller's, or a stand-in
	done chan struct{} // one value when the reply is in
	// state says whether a worker took the command (claimed) or its caller
	// gave up on it first (abandoned): claim and abandon, in abandon.go.
	state atomic.Int32
}

// CoalesceOptions tune a Coalescer.
type CoalesceOptions struct {
	// Pipelines is how many pipelines may be on the wire at once (default
	// 4): one at a time, more only while those out have been for Stall.
	// New commands wait and go out together in the next one.
	Pipelines int
	// Stall is how long a pipeline has the wire to itself before another
	// may go out beside it (default 5 ms: half the default decision timeout,
	// so that commands stuck behind a slow reply still go out within it).
	Stall time.Duration
	// MaxBatch bounds the commands of one pipeline (default 128).
	MaxBatch int
	// Timeout bounds one pipeline's round trip (the client's step timeout,
	// RedisOptions.MaxWait); callers bound their own waits.
	Timeout time.Duration
}

// Coalesce adds a Coalescer to rdb; stop ends it (after the pipelines on
// the wire return). Commands sent after stop go out one by one.
func Coalesce(rdb redis.UniversalClient, o CoalesceOptions) (*Coalescer, func()) {
	return coalesce(rdb, o, stallTimer, runtime.Gosched)
}

func coalesce(rdb redis.UniversalClient, o CoalesceOptions, newTimer func(func()) timer, yield func()) (*Coalescer, func()) {
	if o.Pipelines <= 0 {
		o.Pipelines = 4
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Stall <= 0 {
		o.Stall = defaultStall
	}
	c := &Coalescer{rdb: rdb, queue: make(chan *coalesced, o.MaxBatch*o.Pipelines),
		base:     context.WithValue(context.Background(), coalescedKey{}, true),
		maxBatch: o.MaxBatch, timeout: o.Timeout, stop: make(chan struct{}),
		lead: make(chan struct{}, 1), stall: o.Stall, newTimer: newTimer, yield: yield}
	c.lead <- struct{}{}
	c.running.Store(true)
	c.pending.New = func() any { return &coalesced{done: make(chan struct{}, 1)} }
	c.done.Add(o.Pipelines)
	for range o.Pipelines {
		go c.work()
	}
	rdb.AddHook(c)
	var once sync.Once
	return c, func() {
		once.Do(func() {
			c.running.Store(false)
			c.closing.Lock()
			c.closed = true
			c.closing.Unlock()
			close(c.stop)
			c.done.Wait()
		})
	}
}

// defaultStall is CoalesceOptions.Stall's default.
const defaultStall = 5 * time.Millisecond

// timer is what a worker needs of a *time.Timer made by time.AfterFunc.
type timer interface {
	Reset(time.Duration) bool
	Stop() bool
}

// stallTimer is a stopped timer that runs f each time it fires after a
// Reset. One per worker, reset per pipeline: no timer made per pipeline.
func stallTimer(f func()) timer {
	t := time.AfterFunc(time.Hour, f)
	t.Stop()
	return t
}

// Abandons reports whether the Coalescer is running: whether a command of
// the types it carries returns as soon as its caller's context ends. After
// stop, commands go out one by one, as go-redis's own: they end at their
// context's deadline or their read timeout, not at a cancellation. A nil
// Coalescer (none) abandons nothing.
func (c *Coalescer) Abandons() bool { return c != nil && c.running.Load() }

// Stats reports the pipelines sent and the commands they carried.
func (c *Coalescer) Stats() (pipelines, commands int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches, c.cmds
}

// DialHook passes dials through.
func (c *Coalescer) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook passes pipelines and transactions through: they are
// written together already.
func (c *Coalescer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook queues a single command for the next pipeline and waits for
// its reply, or for ctx to end.
func (c *Coalescer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !coalescable[cmd.Name()] {
			return next(ctx, cmd)
		}
		p := c.pending.Get().(*coalesced)
		p.cmd = cmd
		// A caller that may give up has the pipeline carry a stand-in
		// (abandon.go): what the pipeline writes after the caller went is
		// then nobody's. A context that never ends needs none; a command
		// of a type without a stand-in waits for its reply.
		// Its waiter may also give up before ctx ends (guard.GiveUp: the
		// Fallback's inline wait), which is the same leaving.
		var leave, giveUp <-chan struct{}
		if ended, gu := ctx.Done(), guard.GiveUp(ctx); ended != nil || gu != nil {
			if s := standIn(c.base, cmd); s != nil {
				p.cmd, leave, giveUp = s, ended, gu
			}
		}
		c.closing.RLock()
		if c.closed {
			c.closing.RUnlock()
			c.recycle(p)
			return next(ctx, cmd)
		}
		// The queue nearly always has room: try it before waiting on
		// ctx. A ctx already ended is answered at once, as one that ends
		// while the command waits for room: never sent.
		err := ctx.Err()
		if err == nil {
			select {
			case c.queue <- p:
			default:
				select {
				case c.queue <- p:
				case <-ctx.Done():
					err = ctx.Err()
				case <-giveUp:
					err = context.Canceled
				}
			}
		}
		c.closing.RUnlock()
		if err != nil {
			c.recycle(p)
			return err
		}
		return c.await(ctx, leave, giveUp, cmd, p)
	}
}

// work is one pipeline on the wire at a time: holding the wire's token
// (lead), it takes the first command waiting, gathers what else waits
// behind it, and sends them together. It hands the token on when the reply
// is in, or earlier if the pipeline is out for longer than stall.
// Pipelines workers run for the Coalescer's life: while the token is held,
// new commands gather in the queue and go out together next. Kept
// goroutines, not one per pipeline: a pipeline is deep (go-redis and its
// hooks), and a fresh goroutine would grow its stack on every one.
func (c *Coalescer) work() {
	defer c.done.Done()
	batch := make([]*coalesced, 0, c.maxBatch)
	// One Pipeline per worker, reused: a fresh one per batch costs
	// allocations (go-redis binds its methods in closures). Exec hands
	// its commands back and keeps none, so nothing outlives its reply.
	pipe := c.rdb.Pipeline()
	// The token goes back exactly once per pipeline: by the stall timer if
	// it fires (Stop then reports false), else after the reply.
	handOn := func() { c.lead <- struct{}{} }
	stall := c.newTimer(handOn)
	last := 0 // commands in the worker's last pipeline
	for {
		select {
		case <-c.lead:
		case <-c.stop:
			c.drain(pipe)
			return
		}
		select {
		case first := <-c.queue:
			batch = append(batch[:0], first)
		case <-c.stop:
			c.lead <- struct{}{} // not held any more (drains need none)
			c.drain(pipe)
			return
		}
		c.gather(&batch, last > 1)
		last = len(batch)
		if batch = claim(batch); len(batch) == 0 { // all given up on: nothing to send
			handOn()
			continue
		}
		stall.Reset(c.stall)
		c.send(pipe, batch)
		if stall.Stop() { // not handed on yet: the reply came first
			handOn()
		}
		clear(batch) // hold no command past its reply
	}
}

// gather adds to batch what waits in the queue, up to maxBatch. When
// busy (the last pipeline carried more than one command) it first yields
// its processor once: the request goroutines that are ready to run reach
// their Redis call and queue it, and go out in this pipeline instead of
// the next. A pipeline's cost to Redis is mostly per call (reading and
// parsing it, the joined script's start), so more commands per pipeline
// is less Redis CPU per decision; idle, nothing else is ready and the
// yield returns at once.
func (c *Coalescer) gather(batch *[]*coalesced, busy bool) {
	c.take(batch)
	if busy && len(*batch) < c.maxBatch {
		c.yield()
		c.take(batch)
	}
}

// take adds to batch what waits in the queue now, up to maxBatch.
func (c *Coalescer) take(batch *[]*coalesced) {
	for len(*batch) < c.maxBatch {
		select {
		case p := <-c.queue:
			*batch = append(*batch, p)
		default:
			return
		}
	}
}

// drain answers what is still queued at stop, one pipeline at a time.
func (c *Coalescer) drain(pipe redis.Pipeliner) {
	for {
		select {
		case p := <-c.queue:
			if b := claim([]*coalesced{p}); len(b) != 0 {
				c.send(pipe, b)
			}
		default:
			return
		}
	}
}

// send writes batch as one pipeline (pipe, empty) and hands each command
// its reply. The calls of a joinable family of scripts go as one call
// (merge.go).
func (c *Coalescer) send(pipe redis.Pipeliner, batch []*coalesced) {
	ctx, cancel := context.WithTimeout(c.base, c.timeout)
	defer cancel()
	var js joins
	join := joinsOn(c.rdb)
	for _, p := range batch {
		if join && js.add(p.cmd) {
			continue
		}
		_ = pipe.Process(ctx, p.cmd) // queued only: Exec sends
	}
	js.queue(ctx, pipe)
	_, _ = pipe.Exec(ctx) // each command carries its own reply or error
	js.split(ctx, c.rdb)
	// Counted before the replies are handed out: a caller that has its
	// reply sees its pipeline in Stats.
	c.mu.Lock()
	c.batches++
	c.cmds += int64(len(batch))
	c.mu.Unlock()
	for _, p := range batch {
		p.done <- struct{}{}
	}
}

var _ redis.Hook = (*Coalescer)(nil)

// coalescable lists the commands a Coalescer batches: the decisions'
// scripts and plain counters. Everything else goes out on its own, above
// all what go-redis sends while it sets a connection up (HELLO, AUTH,
// SELECT, CLIENT): queued behind a pipeline that waits for that very
// connection, it would never be sent.
var coalescable = map[string]bool{
	"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true,
	"get": true, "set": true, "incr": true, "incrby": true, "del": true,
}

// coalescedKey marks the context of a Coalescer's pipeline, so that the
// TimingHook does not count its commands twice (each was timed as the
// caller waited for it).
type coalescedKey struct{}
