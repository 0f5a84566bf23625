package httpapi

import (
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/problem"
)

// admission bounds the decisions an instance works on at once. A decision
// past the bound is answered at once with 503 overloaded and spends
// nothing: it never reaches Redis and is never decided by the fallback.
//
// Why shed rather than queue: on a saturated host every request waiting
// inside otpguard stretches the round trip of every other, until healthy
// Redis calls look like an outage; a request refused at once costs the
// caller one retry and keeps the rest exact and fast. Why shed rather than
// fall back: the fallback is for a Redis that does not answer; deciding
// from memory because otpguard itself is busy would loosen every limit
// exactly when traffic spikes.
type admission struct {
	slots   chan struct{} // nil: no bound
	metrics *metrics.Set
	shed    *atomic.Int64 // requests shed since start, for the attack view
	// shedAt is when the last request was shed (unix nanoseconds, 0:
	// never): the desk's status says "shedding" while it is recent.
	shedAt *atomic.Int64
}

func newAdmission(maxInFlight int, m *metrics.Set) admission {
	a := admission{metrics: m, shed: new(atomic.Int64), shedAt: new(atomic.Int64)}
	if maxInFlight > 0 {
		a.slots = make(chan struct{}, maxInFlight)
	}
	return a
}

// middleware admits the request if a slot is free, else sheds it.
func (a admission) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		if !a.enter(c.Path()) {
			return problem.Overloaded(problem.ErrOverloaded)
		}
		defer func() { a.leave(err, c.Path()) }()
		return next(c)
	}
}

func (a admission) shedOne(route string) {
	a.shed.Add(1)
	a.shedAt.Store(time.Now().UnixNano())
	a.metrics.Shed(route)
}

// enter takes a slot for a request on route: false (shed, counted) when
// none is free. leave gives it back.
func (a admission) enter(route string) bool {
	if a.slots == nil {
		return true
	}
	select {
	case a.slots <- struct{}{}:
		return true
	default:
		a.shedOne(route)
		return false
	}
}

func (a admission) leave(err error, route string) {
	if a.slots != nil {
		<-a.slots
	}
	if problem.CodeOf(err) == problem.CodeOverloaded { // admitted, then given up on a healthy Redis
		a.shedOne(route)
	}
}
