package resilience

import "time"

// workers runs the store calls the Fallback waits for but cannot abandon
// (waitOnWorker: a MULTI/EXEC, a command not coalesced) on goroutines that
// are kept for the next call, instead of a new goroutine per call. Calls
// that can be abandoned (Abandoner: the /limits/check scripts) run on the
// caller's goroutine instead, with no hand-off at all (inline.go).
//
// Why: a store call is deep (go-redis, its hooks, the coalescer), so a
// fresh goroutine grows its stack several times on every call. The CPU
// profile of a saturated /limits/check showed runtime.newstack and
// copystack at 5-19 % of otpguard's CPU (docs/benchmarks.md, section 0). A
// kept goroutine has its stack grown already. grpc-go's server workers
// reuse goroutines for the same reason.
//
// There is no bound: a call finds an idle worker or starts one, so no call
// ever waits for a worker (the Fallback's timeout must hold). A worker idle
// for idleFor ends.
type workers struct {
	jobs    chan func()
	idleFor time.Duration
}

func newWorkers(idleFor time.Duration) *workers {
	return &workers{jobs: make(chan func()), idleFor: idleFor}
}

// run runs fn on an idle worker, or on a new one if none is idle.
func (w *workers) run(fn func()) {
	select {
	case w.jobs <- fn:
	default:
		go w.work(fn)
	}
}

func (w *workers) work(fn func()) {
	idle := time.NewTimer(w.idleFor)
	defer idle.Stop()
	for {
		fn()
		fn = nil
		idle.Reset(w.idleFor)
		select {
		case fn = <-w.jobs:
		case <-idle.C:
			return
		}
	}
}
