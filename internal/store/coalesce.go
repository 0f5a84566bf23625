package store

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coalescer sends the single commands of concurrent requests to Redis
// together: whatever commands are waiting when a connection is free go out
// in one pipeline, one write and one read for many requests, instead of a
// write and a read each. On a saturated host that is most of otpguard's CPU
// per decision (syscalls), and Redis reads many commands per event too.
//
// Each command stays what it was: a script call is atomic on its own, and a
// command's reply or error is its own (a pipeline does not stop at a failed
// command). Transactions (MULTI/EXEC, the OTP send counters) are not
// coalesced: they go out as before, on a connection of their own. A caller
// whose context ends while its command is queued is answered at once (the
// command is dropped unsent); once the command is in a pipeline, the
// caller waits for the reply, as go-redis's own calls do.
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
	stop     chan struct{}
	done     sync.WaitGroup
	// closing is held (read) while a command is queued, and (write) by
	// stop: once closed is set, nothing more is queued, and run answers
	// all that was.
	closing sync.RWMutex
	closed  bool

	mu      sync.Mutex
	batches int64
	cmds    int64
}

type coalesced struct {
	cmd  redis.Cmder
	done chan struct{} // one value when the reply is in
}

// CoalesceOptions tune a Coalescer.
type CoalesceOptions struct {
	// Pipelines is how many pipelines may be on the wire at once (default
	// 4): while they are, new commands wait and go out together next.
	Pipelines int
	// MaxBatch bounds the commands of one pipeline (default 128).
	MaxBatch int
	// Timeout bounds one pipeline's round trip (the client's step timeout,
	// RedisOptions.MaxWait); callers bound their own waits.
	Timeout time.Duration
}

// Coalesce adds a Coalescer to rdb; stop ends it (after the pipelines on
// the wire return). Commands sent after stop go out one by one.
func Coalesce(rdb redis.UniversalClient, o CoalesceOptions) (*Coalescer, func()) {
	if o.Pipelines <= 0 {
		o.Pipelines = 4
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	c := &Coalescer{rdb: rdb, queue: make(chan *coalesced, o.MaxBatch*o.Pipelines),
		base:     context.WithValue(context.Background(), coalescedKey{}, true),
		maxBatch: o.MaxBatch, timeout: o.Timeout, stop: make(chan struct{})}
	c.pending.New = func() any { return &coalesced{done: make(chan struct{}, 1)} }
	c.done.Add(o.Pipelines)
	for range o.Pipelines {
		go c.work()
	}
	rdb.AddHook(c)
	var once sync.Once
	return c, func() {
		once.Do(func() {
			c.closing.Lock()
			c.closed = true
			c.closing.Unlock()
			close(c.stop)
			c.done.Wait()
		})
	}
}

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
		c.closing.RLock()
		if c.closed {
			c.closing.RUnlock()
			p.cmd = nil
			c.pending.Put(p)
			return next(ctx, cmd)
		}
		// The queue nearly always has room: try it before waiting on
		// ctx.Done, whose first call makes the context's channel (an
		// allocation per command). A ctx already ended is answered at
		// once, as one that ends while the command waits for room.
		err := ctx.Err()
		if err == nil {
			select {
			case c.queue <- p:
			default:
				select {
				case c.queue <- p:
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
		}
		c.closing.RUnlock()
		if err != nil {
			p.cmd = nil
			c.pending.Put(p)
			return err
		}
		// The command belongs to its pipeline until the reply is in: the
		// caller waits for it (at most the pipeline's timeout) even if its
		// context ends. Giving up earlier is the guard's Fallback's job,
		// one level up, which waits for this call in a goroutine of its own.
		<-p.done
		p.cmd = nil
		c.pending.Put(p)
		return cmd.Err()
	}
}

// work is one pipeline on the wire at a time: it takes the first command
// waiting, gathers what else waits behind it, and sends them together.
// Pipelines workers run for the Coalescer's life: while every one is busy,
// new commands gather in the queue and go out together next. Kept
// goroutines, not one per pipeline: a pipeline is deep (go-redis and its
// hooks), and a fresh goroutine grew its stack on every one (the CPU
// profile in docs/benchmarks.md, section 0).
func (c *Coalescer) work() {
	defer c.done.Done()
	batch := make([]*coalesced, 0, c.maxBatch)
	// One Pipeline per worker, reused: a fresh one per batch was four
	// allocations (go-redis binds its methods in closures). Exec hands
	// its commands back and keeps none, so nothing outlives its reply.
	pipe := c.rdb.Pipeline()
	for {
		select {
		case first := <-c.queue:
			batch = append(batch[:0], first)
		case <-c.stop:
			c.drain(pipe)
			return
		}
	gather:
		for len(batch) < c.maxBatch {
			select {
			case p := <-c.queue:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		c.send(pipe, batch)
		clear(batch) // hold no command past its reply
	}
}

// drain answers what is still queued at stop, one pipeline at a time.
func (c *Coalescer) drain(pipe redis.Pipeliner) {
	for {
		select {
		case p := <-c.queue:
			c.send(pipe, []*coalesced{p})
		default:
			return
		}
	}
}

// send writes batch as one pipeline (pipe, empty) and hands each command
// its reply.
func (c *Coalescer) send(pipe redis.Pipeliner, batch []*coalesced) {
	ctx, cancel := context.WithTimeout(c.base, c.timeout)
	defer cancel()
	for _, p := range batch {
		_ = pipe.Process(ctx, p.cmd) // queued only: Exec sends
	}
	_, _ = pipe.Exec(ctx) // each command carries its own reply or error
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
