package resilience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// BreakerOptions tune when the Fallback stops waiting on the store. The
// zero value means the defaults in the README ("When Redis is down").
type BreakerOptions struct {
	// Failures in a row that open the breaker (default 5).
	Failures int
	// Or: at least MinRequests calls in Window of which at least
	// FailureRatio failed (defaults 20 and 0.5): a flapping store opens it
	// too, one slow call never does.
	MinRequests  int
	FailureRatio float64
	Window       time.Duration // rolling, in one-second buckets (default 10s)
	// OpenFor is how long the breaker stays open before one probe call may
	// go to the store again (default 1s). The probe's success closes it.
	OpenFor time.Duration
}

func (b BreakerOptions) withDefaults() BreakerOptions {
	if b.Failures <= 0 {
		b.Failures = 5
	}
	if b.MinRequests <= 0 {
		b.MinRequests = 20
	}
	if b.FailureRatio <= 0 || b.FailureRatio > 1 {
		b.FailureRatio = 0.5
	}
	if b.Window <= 0 {
		b.Window = 10 * time.Second
	}
	if b.OpenFor <= 0 {
		b.OpenFor = time.Second
	}
	return b
}

// newBreaker is the breaker over Redis: it opens after b.Failures failures
// in a row, or on b.FailureRatio of at least b.MinRequests calls in
// b.Window, and lets one trial through after b.OpenFor. closed is called
// (under the breaker's lock) when it closes again.
func newBreaker(b BreakerOptions, log *slog.Logger, closed func()) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         "redis",
		MaxRequests:  1,
		Interval:     b.Window,
		BucketPeriod: time.Second,
		Timeout:      b.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(b.Failures) ||
				(c.Requests >= uint32(b.MinRequests) && float64(c.TotalFailures) >= b.FailureRatio*float64(c.Requests))
		},
		// Called under the breaker's lock, once per change: log, nothing more.
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch to {
			// One WARN line per outage: a failed probe (half-open back to
			// open) and the probing are the same outage going on.
			case gobreaker.StateOpen:
				level := slog.LevelWarn
				if from == gobreaker.StateHalfOpen {
					level = slog.LevelDebug
				}
				log.Log(context.Background(), level, "redis breaker open: decisions go to the fallback without waiting on Redis",
					"from", from.String(), "probe_in", b.OpenFor.String())
			case gobreaker.StateHalfOpen:
				log.Debug("redis breaker half-open: probing Redis")
			case gobreaker.StateClosed:
				log.Info("redis breaker closed: Redis answers again, limits are shared and exact")
				closed()
			}
		},
		IsSuccessful: answered,
		// A caller that went away, or a call given up on while Redis was
		// healthy, says nothing about Redis.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) || errors.Is(err, problem.ErrOverloaded) },
	})
}

// calls makes each store call through its node's breaker, within the
// timeout, and past it, up to the ceiling, while the probe vouches for
// Redis (probe.go, inline.go). It counts what became of the calls.
type calls struct {
	nodes   *nodes
	timeout time.Duration
	ceiling time.Duration
	fresh   time.Duration // one probe round, ProbeEvery + ProbeTimeout
	probeTO time.Duration
	warm    func(ctx context.Context) error
	now     func() time.Time
	waits   sync.Pool // *inlineWait, each with its timer (inline.go)

	lastFailure atomic.Int64 // unix nanoseconds of the last failed store call
	shed        atomic.Int64 // calls given up on while Redis was healthy
	late        atomic.Int64 // calls answered past the timeout by a healthy Redis
}

func (c *calls) failed() { c.lastFailure.Store(c.now().UnixNano()) }

// lastFailed is when a store call last failed (zero: never).
func (c *calls) lastFailed() time.Time {
	n := c.lastFailure.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// call makes one store call through the breaker. It waits for the store
// as long as Redis is known to be healthy (wait), and fails at once while
// the breaker is not closed: then only the probe tries Redis (without a
// probe, one call is let through as the breaker's half-open trial).
//
// n is the node the call goes to (nodes.go). On a single node, a decision
// in which the store failed once fails its later calls at once
// (limit.StoreFailed); on Redis Cluster another node may well answer them.
func (c *calls) call(ctx context.Context, n *node, fn func(ctx context.Context) error) error {
	return c.callAs(ctx, n, false, fn)
}

// callAs is call for fn that returns as soon as its context is cancelled
// when abandons is true (Abandoner): wait then runs it on the caller's
// goroutine.
func (c *calls) callAs(ctx context.Context, n *node, abandons bool, fn func(ctx context.Context) error) error {
	if !c.nodes.multi() && limit.StoreFailed(ctx) {
		return fmt.Errorf("resilience: store failed earlier in this decision: %w", limit.ErrStoreUnavailable)
	}
	if st := n.breaker.State(); st != gobreaker.StateClosed && n.probing() {
		// Only the probe tries Redis while the breaker is not closed.
		c.failed()
		return fmt.Errorf("resilience: redis breaker %s%s: %w", st, n.label(), limit.ErrStoreUnavailable)
	}
	done, err := n.breaker.Allow()
	if err != nil {
		c.failed()
		return fmt.Errorf("resilience: redis breaker %s%s: %w (%w)", n.breaker.State(), n.label(), limit.ErrStoreUnavailable, err)
	}
	err = c.wait(ctx, n, abandons, fn)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up: that says nothing about the store.
		err = errors.Join(err, ctx.Err())
		done(err)
		return err
	}
	done(err)
	if answered(err) {
		n.callOK.Store(time.Now().UnixNano())
	}
	if !answered(err) && !errors.Is(err, problem.ErrOverloaded) {
		limit.NoteStoreFailure(ctx)
		c.failed()
	}
	return err
}

// answered reports whether err says the node answered: no error, nothing
// found, or a code saved whose id's index (on another node) was not.
func answered(err error) bool {
	return err == nil || errors.Is(err, guard.ErrNotFound) || errors.Is(err, guard.ErrUnindexed)
}

// label names n in an error, when it has a name.
func (n *node) label() string {
	if n.name == "" {
		return ""
	}
	return " (node " + n.name + ")"
}
