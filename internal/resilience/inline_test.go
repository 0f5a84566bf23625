package resilience_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// abandoningStore is a queuedStore that says its Takes can be abandoned
// (they return as soon as their context ends, as queuedStore's do): the
// Fallback then waits for them on the caller's goroutine.
type abandoningStore struct{ *queuedStore }

func (abandoningStore) TakeAbandons([]limit.Take) bool { return true }

var _ resilience.Abandoner = abandoningStore{}

// forEachWait runs test over a queuedStore as it is (its calls are held to
// one deadline, waitBounded) and as an abandoningStore (given up on when
// the probe stops vouching, waitInline): both ways of waiting must give
// the same verdicts.
func forEachWait(t *testing.T, test func(t *testing.T, st *queuedStore, counter limit.Counter)) {
	t.Run("bounded", func(t *testing.T) {
		st := newQueuedStore()
		test(t, st, st)
	})
	t.Run("inline", func(t *testing.T) {
		st := newQueuedStore()
		test(t, st, abandoningStore{st})
	})
}

// goroutineID is the calling goroutine's number, from its stack's header.
func goroutineID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	id, _ := strconv.Atoi(string(buf[:bytes.IndexByte(buf, ' ')]))
	return id
}

// placedStore answers at once, and records on which goroutine each Take ran.
type placedStore struct {
	abandons bool
	mu       sync.Mutex
	ran      []int
	unbound  int // calls whose context had no deadline
}

func (p *placedStore) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	p.mu.Lock()
	p.ran = append(p.ran, goroutineID())
	if _, ok := ctx.Deadline(); !ok {
		p.unbound++
	}
	p.mu.Unlock()
	res := make([]limit.Result, len(takes))
	for i, t := range takes {
		res[i] = limit.Result{Allowed: true, Limit: t.Limit, Count: 1, Remaining: t.Limit - 1, Spent: true}
	}
	return res, nil
}

func (p *placedStore) Refund(context.Context, []limit.Take) error { return nil }

func (p *placedStore) TakeAbandons([]limit.Take) bool { return p.abandons }

// TestEveryTakeRunsOnTheCallersGoroutine: with the probe reporting (so
// that wait watches the clock), every Take runs on the caller's own
// goroutine, no hand-off: one the counter can abandon (waitInline) and one
// it cannot (a MULTI/EXEC: waitBounded). Both have a deadline.
func TestEveryTakeRunsOnTheCallersGoroutine(t *testing.T) {
	for _, abandons := range []bool{true, false} {
		st := &placedStore{abandons: abandons}
		f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Timeout: time.Minute})
		f.ObserveProbe(context.Background(), nil)
		const calls = 20
		for range calls {
			res, err := f.Take(context.Background(), []limit.Take{openTake})
			if err != nil || res[0].Fallback {
				t.Fatalf("Take: %+v, %v; want the store's answer", res, err)
			}
		}
		me, here := goroutineID(), 0
		for _, id := range st.ran {
			if id == me {
				here++
			}
		}
		if len(st.ran) != calls || here != calls {
			t.Errorf("abandons %v: %d of %d store calls ran on the caller's goroutine, want %d", abandons, here, len(st.ran), calls)
		}
		// A deadline (the ceiling) on both paths: store's timeoutHook
		// would otherwise make a WithTimeout of its own per command.
		if st.unbound != 0 {
			t.Errorf("abandons %v: %d store calls without a deadline", abandons, st.unbound)
		}
	}
}

// TestInlineCallEndsAtTheTimeoutUnvouched: an abandonable call past the
// timeout while the probe does not vouch for Redis is cancelled (the store
// sees its context end) and the fallback decides; the store call has
// returned by then: nothing of it goes on.
func TestInlineCallEndsAtTheTimeoutUnvouched(t *testing.T) {
	st := newQueuedStore() // never released
	// The default breaker: one failed probe stops the vouching and leaves
	// the breaker closed, so the call is made.
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: abandoningStore{st}, Timeout: time.Microsecond, Ceiling: time.Minute})
	f.ObserveProbe(context.Background(), errors.New("dial tcp: connection refused"))
	res, err := f.Take(context.Background(), []limit.Take{openTake})
	if err != nil || !res[0].Fallback {
		t.Fatalf("Take: %+v, %v; want a fallback decision (open)", res, err)
	}
	if st.calls.Load() != 1 {
		t.Fatalf("%d store calls, want 1", st.calls.Load())
	}
	st.done.Wait() // returned already: Take waited for it on this goroutine
	if f.Late() != 0 || f.Shed() != 0 {
		t.Errorf("late %d, shed %d: want 0 and 0", f.Late(), f.Shed())
	}
}

// TestInlineCallerCancelIsTheCallersError: a caller that goes away while
// an abandonable call waits gets its own context's error, and the breaker
// hears nothing of it.
func TestInlineCallerCancelIsTheCallersError(t *testing.T) {
	st := newQueuedStore() // never released
	f := overloadFallback(abandoningStore{st}, time.Minute)
	stop := keepVouching(f)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for st.calls.Load() == 0 {
			runtime.Gosched()
		}
		cancel()
	}()
	_, err := f.Take(ctx, []limit.Take{openTake})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Take: %v, want %v", err, context.Canceled)
	}
	if s := f.Status(); s.Breaker != "closed" || f.Shed() != 0 {
		t.Errorf("breaker %s, shed %d: want closed and 0", s.Breaker, f.Shed())
	}
}

// BenchmarkWait is one Take through the Fallback, the probe reporting, on
// a store that answers at once: what waiting costs on each path (bounded:
// WithDeadline and its timer; inline: a give-up channel and a timer).
func BenchmarkWait(b *testing.B) {
	for _, abandons := range []bool{false, true} {
		b.Run(map[bool]string{false: "bounded", true: "inline"}[abandons], func(b *testing.B) {
			st := &quickStore{abandons: abandons}
			f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Timeout: time.Minute})
			f.ObserveProbe(context.Background(), nil)
			ctx, cancel := context.WithCancel(context.Background()) // a request's, cancellable
			defer cancel()
			takes := []limit.Take{openTake}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := f.Take(ctx, takes); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// quickStore answers at once, looking at its context's Done and its
// give-up channel as the Coalescer does.
type quickStore struct{ abandons bool }

func (q *quickStore) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-guard.GiveUp(ctx):
		return nil, context.Canceled
	default:
	}
	return make([]limit.Result, len(takes)), nil
}

func (q *quickStore) Refund(context.Context, []limit.Take) error { return nil }

func (q *quickStore) TakeAbandons([]limit.Take) bool { return q.abandons }
