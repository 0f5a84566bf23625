package metrics

import (
	"testing"
	"time"
)

// TestHTTPMetricsAllocateNothing: once a route's status has been seen,
// recording a request allocates nothing (the per-request path is hot).
func TestHTTPMetricsAllocateNothing(t *testing.T) {
	m := New()
	m.FreezeRoutes([]Route{{"POST", "/limits/check"}}, nil)
	m.ObserveHTTP("POST", "/limits/check", 200, time.Millisecond) // creates the child
	if n := testing.AllocsPerRun(100, func() {
		m.ObserveHTTP("POST", "/limits/check", 200, time.Millisecond)
		m.ObserveHTTP("GET", "/no/such/route", 404, time.Millisecond)
	}); n != 0 {
		t.Errorf("ObserveHTTP allocates %v times per request, want 0", n)
	}
	if got := histCount(t, m.http.duration, "POST", "/limits/check", "200"); got != 102 {
		t.Errorf("POST /limits/check 200 observed %d times, want 102", got)
	}
	if got := histCount(t, m.http.duration, "other", unmatchedRoute, "404"); got != 101 {
		t.Errorf("unmatched 404 observed %d times, want 101", got)
	}
}

// BenchmarkHTTPMetricsObserve is what each request pays for the HTTP
// metrics: go test -run X -bench HTTPMetricsObserve -benchmem ./internal/metrics/
func BenchmarkHTTPMetricsObserve(b *testing.B) {
	m := New()
	m.FreezeRoutes([]Route{{"POST", "/limits/check"}}, nil)
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveHTTP("POST", "/limits/check", 200, time.Millisecond)
	}
}
