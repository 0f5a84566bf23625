package metrics

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics count and time every request by method, route and status.
// The route is echo's template ("/ops/blocked/:phone"), never the path
// asked for, and anything no route matched is one "unmatched" route: the
// label values stay as few as the routes.
//
// The children are looked up once and kept: a request reads two maps that
// no one writes after start-up and one atomic pointer, and allocates
// nothing (the first request of a status on a route creates its child).
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// routes: method, then route template. Written by freeze only, before
	// the server takes requests.
	routes    map[string]map[string]*routeMetrics
	unmatched *routeMetrics
}

// unmatchedRoute is the route label of requests no route matched (404,
// or a method no route has), with the method label "other".
const unmatchedRoute = "unmatched"

// Statuses are 100 to 599 (499: the caller went away).
const minStatus, maxStatus = 100, 599

type routeMetrics struct {
	method, route string
	byStatus      [maxStatus - minStatus + 1]atomic.Pointer[statusMetrics]
}

type statusMetrics struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	h := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_http_requests_total",
			Help: "HTTP requests answered, by method, route (the route's template; unmatched for no route) and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "otpguard_http_request_duration_seconds",
			Help: "Time from the request's arrival at otpguard's handler to its answer, by method, route and status.",
			// From a denial repeated from memory to an SMS provider that
			// takes its whole timeout.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "status"}),
		routes: map[string]map[string]*routeMetrics{},
	}
	h.unmatched = &routeMetrics{method: "other", route: unmatchedRoute}
	reg.MustRegister(h.requests, h.duration)
	return h
}

// Route is one registered route: its method and its template
// ("/ops/blocked/:phone").
type Route struct{ Method, Path string }

// FreezeRoutes learns the server's routes, before it takes requests.
// statuses, per "METHOD route", are created at zero, so that alert rules
// on them work before the first request.
func (m *Set) FreezeRoutes(routes []Route, statuses map[string][]int) {
	m.http.freeze(routes, statuses)
}

// ObserveHTTP records one answered request: route is the template the
// request matched ("" or unknown: unmatched).
func (m *Set) ObserveHTTP(method, route string, status int, d time.Duration) {
	m.http.observe(method, route, status, d)
}

func (h *httpMetrics) freeze(routes []Route, statuses map[string][]int) {
	for _, r := range routes {
		byRoute := h.routes[r.Method]
		if byRoute == nil {
			byRoute = map[string]*routeMetrics{}
			h.routes[r.Method] = byRoute
		}
		rm := &routeMetrics{method: r.Method, route: r.Path}
		byRoute[r.Path] = rm
		for _, st := range statuses[r.Method+" "+r.Path] {
			h.child(rm, st)
		}
	}
}

// observe records one answered request.
func (h *httpMetrics) observe(method, route string, status int, d time.Duration) {
	rm := h.routes[method][route]
	if rm == nil {
		rm = h.unmatched
	}
	if status < minStatus || status > maxStatus {
		status = 500 // nothing writes one; keep the array bounded
	}
	sm := h.child(rm, status)
	sm.requests.Inc()
	sm.duration.Observe(d.Seconds())
}

func (h *httpMetrics) child(rm *routeMetrics, status int) *statusMetrics {
	p := &rm.byStatus[status-minStatus]
	if sm := p.Load(); sm != nil {
		return sm
	}
	st := strconv.Itoa(status)
	sm := &statusMetrics{
		requests: h.requests.WithLabelValues(rm.method, rm.route, st),
		duration: h.duration.WithLabelValues(rm.method, rm.route, st),
	}
	if !p.CompareAndSwap(nil, sm) {
		return p.Load()
	}
	return sm
}
