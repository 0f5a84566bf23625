package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestReadResponse(t *testing.T) {
	const next = "HTTP/1.1 204 No Content\r\n\r\n" // what follows must be left intact
	for _, tc := range []struct {
		name, raw string
		want      response
		wantErr   bool
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 12\r\n\r\n{\"ok\":true}\n", response{200, true}, false},
		{"denied", "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\nRetry-After: 1\r\n\r\n{}", response{429, true}, false},
		{"chunked with a trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", response{200, true}, false},
		{"connection close", "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", response{503, false}, false},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", response{200, true}, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", response{200, false}, false},
		{"no status line", "hello\r\n\r\n", response{}, true},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", response{}, true},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", response{200, true}, true},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", response{200, true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw
			if !tc.wantErr {
				raw += next
			}
			r := bufio.NewReader(strings.NewReader(raw))
			got, err := readResponse(r)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("readResponse = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got, err := readResponse(r); err != nil || got.Status != 204 {
				t.Errorf("the next response read as %+v, %v: the body was not consumed exactly", got, err)
			}
		})
	}
	// A body that runs to the connection's end ends the connection.
	r := bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\n\r\nall of it"))
	if got, err := readResponse(r); err != nil || got.KeepAlive {
		t.Errorf("body to EOF: %+v, %v; want no keep-alive", got, err)
	}
}

// The hand-written bodies are what encoding/json writes.
func TestEncoderMatchesJSON(t *testing.T) {
	for _, batch := range []int{1, 3} {
		c := &Config{APIKey: "k", Policy: `a"<b>&`, Keys: 7, KeyPrefix: `p\"é:`, Cost: 3, Batch: batch}
		e := newEncoder(c, "h:1")
		for i := range uint64(10) {
			if got, want := string(e.appendBody(nil, i)), string(c.body(i)); got != want {
				t.Errorf("batch %d, request %d: %s, want %s", batch, i, got, want)
			}
		}
		req, _ := e.appendRequest(nil, nil, 2, false, 0)
		hr, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(req))))
		if err != nil || hr.URL.Path != "/limits/check" || hr.Header.Get("Authorization") != "Bearer k" || hr.ContentLength != int64(len(c.body(2))) {
			t.Errorf("request %q reads as %v, %v", req, hr, err)
		}
	}
}

// fakeClock moves only when told: by a sleeper (to the time it sleeps
// until) or by a test's server (to stand for a slow answer).
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) SleepUntil(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.now = t
	}
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// loadAgainst runs rate/s for d over conns connections against handler
// (called with the arrival's number from 0), on a fake clock.
func loadAgainst(t *testing.T, clk *fakeClock, rate, conns int, d, timeout time.Duration, handler func(n int64, w http.ResponseWriter, r *http.Request)) (*tally, int64) {
	t.Helper()
	var arrivals atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler(arrivals.Add(1)-1, w, r)
	}))
	t.Cleanup(srv.Close)
	c := &Config{URL: srv.URL, APIKey: "k", Policy: "p", Keys: 10, KeyPrefix: "x:", Cost: 1, Batch: 1, Rate: rate, Timeout: timeout}
	tgt, err := parseTarget(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	l := &loader{c: c, sched: newSchedule(clk, rate, d, timeout), tgt: tgt, enc: newEncoder(c, tgt.host)}
	tl := runLoad(context.Background(), l, conns)
	return tl, arrivals.Load()
}

func TestLoadCountsEveryRequest(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1e9, 0)}
	tl, arrivals := loadAgainst(t, clk, 1000, 4, 200*time.Millisecond, 5*time.Second, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n%4 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write([]byte(`{"decisions":[]}`))
	})
	if arrivals != 200 || tl.hist.n != 200 || tl.codes[200] != 150 || tl.codes[429] != 50 || len(tl.errs) != 0 {
		t.Errorf("arrivals %d, measured %d, codes %v, errors %v; want 200 arrivals and measurements, 150 × 200, 50 × 429",
			arrivals, tl.hist.n, tl.codes, tl.errs)
	}
}

// A server that stalls shows as the latency of every request due while it
// stalled, and as late sends, not as fewer requests.
func TestStallShowsAsLatency(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1e9, 0)}
	tl, arrivals := loadAgainst(t, clk, 1000, 1, 100*time.Millisecond, 5*time.Second, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 10 {
			clk.Advance(50 * time.Millisecond) // request 10 (due at 10 ms) is answered at 60 ms
		}
	})
	// Requests 11..59 wait for the one connection and go out at 60 ms;
	// those due before 59 ms are more than 1 ms late.
	if arrivals != 100 || tl.hist.n != 100 || tl.codes[200] != 100 || tl.late != 48 {
		t.Errorf("arrivals %d, measured %d, codes %v, late %d; want 100, 100, 100 × 200, 48 late", arrivals, tl.hist.n, tl.codes, tl.late)
	}
	if p99 := tl.hist.quantile(0.99); tl.hist.max != 50*time.Millisecond || p99 < 49*time.Millisecond || p99 > 50*time.Millisecond {
		t.Errorf("max %s, p99 %s; want 50ms and 49-50ms", tl.hist.max, p99)
	}
	if p50 := tl.hist.quantile(0.5); p50 < 996*time.Microsecond || p50 > 1004*time.Microsecond { // request 59's 1 ms
		t.Errorf("p50 %s, want 1ms", p50)
	}
}

// A server that never answers: the request times out (no answer), and the
// requests still unsent when the run's grace has passed count as not sent.
func TestDeadServerCountsUnsentRequests(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1e9, 0)}
	tl, arrivals := loadAgainst(t, clk, 1000, 1, 100*time.Millisecond, 100*time.Millisecond, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 10 {
			clk.Advance(time.Second)           // past the end and its grace
			_, _ = io.Copy(io.Discard, r.Body) // (the server watches the connection once the body is read)
			<-r.Context().Done()               // until the client gives up
		}
	})
	if arrivals != 11 || tl.hist.n != 100 || tl.codes[200] != 10 || tl.codes[0] != 90 || tl.notSent != 89 {
		t.Errorf("arrivals %d, measured %d, codes %v, not sent %d; want 11, 100, 10 × 200 and 90 × 0, 89 not sent",
			arrivals, tl.hist.n, tl.codes, tl.notSent)
	}
	if tl.errs[errTimeout.Error()] != 1 {
		t.Errorf("errors %v, want one timeout", tl.errs)
	}
	if tl.hist.quantile(0.5) < 900*time.Millisecond {
		t.Errorf("p50 %s: the unsent requests' wait does not show", tl.hist.quantile(0.5))
	}
}

// At rate 0 a connection sends as soon as it is answered: a closed loop.
func TestMaxRateIsClosedLoop(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1e9, 0)}
	tl, arrivals := loadAgainst(t, clk, 0, 1, 100*time.Millisecond, 5*time.Second, func(n int64, w http.ResponseWriter, r *http.Request) {
		clk.Advance(time.Millisecond)
	})
	if arrivals != 100 || tl.hist.n != 100 || tl.hist.max != time.Millisecond || tl.late != 0 {
		t.Errorf("arrivals %d, measured %d, max %s, late %d; want 100 of 1ms, none late", arrivals, tl.hist.n, tl.hist.max, tl.late)
	}
}

// Interrupted, the load sends nothing more.
func TestLoadStopsWhenInterrupted(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1e9, 0)}
	ctx, cancel := context.WithCancel(context.Background())
	var arrivals atomic.Int64
	var l *loader
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrivals.Add(1) == 5 {
			cancel()
			for !l.sched.halted.Load() { // the interrupt lands (context.AfterFunc runs apart)
				runtime.Gosched()
			}
		}
	}))
	defer srv.Close()
	c := &Config{URL: srv.URL, APIKey: "k", Policy: "p", Keys: 1, KeyPrefix: "x:", Batch: 1, Rate: 0, Timeout: 5 * time.Second}
	tgt, _ := parseTarget(srv.URL)
	l = &loader{c: c, sched: newSchedule(clk, 0, time.Hour, c.Timeout), tgt: tgt, enc: newEncoder(c, tgt.host)}
	done := make(chan *tally)
	go func() { done <- runLoad(ctx, l, 1) }()
	tl := <-done
	if arrivals.Load() != 5 || tl.hist.n != 5 {
		t.Errorf("arrivals %d, measured %d after the interrupt at the 5th; want 5", arrivals.Load(), tl.hist.n)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 501 * time.Microsecond}, {0.99, 991 * time.Microsecond}, {0.999, 1000 * time.Microsecond}} {
		got := h.quantile(tc.p)
		if diff := got - tc.want; diff < -tc.want/256 || diff > tc.want/256 {
			t.Errorf("quantile(%g) = %s, want %s within 0.4%%", tc.p, got, tc.want)
		}
	}
	for _, d := range []time.Duration{0, 1, 255, 256, 257, 1000, time.Millisecond, 3 * time.Second} {
		if m := bucketMiddle(bucketOf(d)); m-d > d/256 || d-m > d/256 {
			t.Errorf("%s falls in a bucket whose middle is %s", d, m)
		}
	}
	if h.mean() != 500500*time.Nanosecond {
		t.Errorf("mean %s, want 500.5µs", h.mean())
	}
}
