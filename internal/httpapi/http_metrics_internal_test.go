package httpapi

import (
	"testing"
	"time"
)

// TestHTTPMetricsAllocateNothing: once a route's status has been seen,
// recording a request allocates nothing (the per-request path is hot).
func TestHTTPMetricsAllocateNothing(t *testing.T) {
	s := New(Options{})
	h := s.metrics.http
	h.observe("POST", "/limits/check", 200, time.Millisecond) // creates the child
	if n := testing.AllocsPerRun(100, func() {
		h.observe("POST", "/limits/check", 200, time.Millisecond)
		h.observe("GET", "/no/such/route", 404, time.Millisecond)
	}); n != 0 {
		t.Errorf("observe allocates %v times per request, want 0", n)
	}
	if got := histCount(t, h.duration, "POST", "/limits/check", "200"); got != 102 {
		t.Errorf("POST /limits/check 200 observed %d times, want 102", got)
	}
	if got := histCount(t, h.duration, "other", unmatchedRoute, "404"); got != 101 {
		t.Errorf("unmatched 404 observed %d times, want 101", got)
	}
}

// BenchmarkHTTPMetricsObserve is what each request pays for the HTTP
// metrics: go test -run X -bench HTTPMetricsObserve -benchmem ./internal/httpapi/
func BenchmarkHTTPMetricsObserve(b *testing.B) {
	h := New(Options{}).metrics.http
	b.ReportAllocs()
	for b.Loop() {
		h.observe("POST", "/limits/check", 200, time.Millisecond)
	}
}
