package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Summary is what an attack measured.
type Summary struct {
	Requests          uint64        // due in the run, sent or not
	Duration          time.Duration // from the first request due to the last answer
	Sent              float64       // requests per second sent
	Answered          float64       // requests per second answered with a decision (200 or 429)
	ChecksPerSecond   float64       // Answered x checks per request
	Decided           float64       // share of requests answered with a decision
	Allowed           float64       // share answered 200
	StatusCodes       map[string]int
	P50, P99, P999    time.Duration
	Max, Mean         time.Duration
	TransportFailures []string
	Late              uint64        // sent more than lateAfter after they were due
	NotSent           uint64        // still unsent -timeout after the end (counted under status 0)
	LoadCPU           time.Duration // this command's own CPU time
}

type checkJSON struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Cost   int64  `json:"cost"`
}

// body is the JSON of request i: one check, or a batch of Batch checks on
// consecutive keys. Keys go round-robin over Keys subjects.
func (c *Config) body(i uint64) []byte {
	key := func(j uint64) string { return c.KeyPrefix + strconv.FormatUint(j%uint64(c.Keys), 10) }
	var v any
	if c.Batch == 1 {
		v = checkJSON{Policy: c.Policy, Key: key(i), Cost: c.Cost}
	} else {
		checks := make([]checkJSON, c.Batch)
		for j := range checks {
			checks[j] = checkJSON{Policy: c.Policy, Key: key(i*uint64(c.Batch) + uint64(j)), Cost: c.Cost}
		}
		v = struct {
			Checks []checkJSON `json:"checks"`
		}{checks}
	}
	b, _ := json.Marshal(v) // plain structs of strings and ints: cannot fail
	return b
}

func (c *Config) header() http.Header {
	return http.Header{
		"Authorization": {"Bearer " + c.APIKey},
		"Content-Type":  {"application/json"},
	}
}

// preflight sends one peek (cost 0: spends nothing) so that a wrong key,
// URL or policy fails at once with the server's reason, not as 100% errors
// after the whole run.
func preflight(ctx context.Context, c *Config, out io.Writer) error {
	body, _ := json.Marshal(checkJSON{Policy: c.Policy, Key: c.KeyPrefix + "preflight", Cost: 0})
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/limits/check", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = c.header()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("preflight: is otpguard running at %s? %w", c.URL, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("preflight: POST %s/limits/check answered %s: %s", c.URL, res.Status, bytes.TrimSpace(b))
	}
	var r struct {
		Decisions []struct {
			Limit int64 `json:"limit"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.Decisions) != 1 {
		return fmt.Errorf("preflight: unexpected answer %q", b)
	}
	fmt.Fprintf(out, "preflight     ok: policy %q has limit %d\n", c.Policy, r.Decisions[0].Limit)
	if c.RedisBenchmark != "" && r.Decisions[0].Limit != c.Capacity {
		fmt.Fprintf(out, "              note: -bucket-capacity is %d, not the policy's %d: redis-benchmark's bucket differs from otpguard's\n", c.Capacity, r.Decisions[0].Limit)
	}
	return nil
}

// attack runs the load for c.Duration and prints progress and a summary.
func attack(ctx context.Context, c *Config, out io.Writer) (Summary, error) {
	if err := preflight(ctx, c, out); err != nil {
		return Summary{}, err
	}
	tgt, err := parseTarget(c.URL)
	if err != nil {
		return Summary{}, err
	}
	before, merr := serverMetrics(ctx, c.URL)
	if merr != nil {
		fmt.Fprintf(out, "note          cannot read %s/metrics (%v): no server figures\n", c.URL, merr)
	}
	conns, what := c.connections(), fmt.Sprintf("at %d/s", c.Rate)
	if c.Rate == 0 { // a closed loop: each connection sends as soon as it is answered
		what = fmt.Sprintf("as fast as possible with %d workers", c.Workers)
	}
	fmt.Fprintf(out, "attacking     %s/limits/check %s for %s (policy %q, %d keys %s*, %d check(s) per request, cost %d, connections %d)\n",
		c.URL, what, c.Duration, c.Policy, c.Keys, c.KeyPrefix, c.Batch, c.Cost, conns)
	l := &loader{c: c, sched: newSchedule(wallClock{}, c.Rate, c.Duration, c.Timeout), tgt: tgt, enc: newEncoder(c, tgt.host)}
	cpu0 := ownCPU()
	stopProgress := progress(out, l)
	t := runLoad(ctx, l, conns)
	stopProgress()
	if ctx.Err() != nil {
		fmt.Fprintln(out, "interrupted: stopped the attack")
	}
	s := summarize(t, l.sched.start, c.Batch)
	s.LoadCPU = ownCPU() - cpu0
	printSummary(out, s)
	if c.SendShare > 0 {
		printSends(out, t.sendCodes)
	}
	if merr == nil {
		if after, err := serverMetrics(context.WithoutCancel(ctx), c.URL); err == nil {
			printServerFigures(out, before, after, s.Answered*s.Duration.Seconds())
		}
	}
	return s, nil
}

// connections is how many connections the run holds: -workers at max
// rate; at a fixed rate -connections, or by default one per 100 requests/s
// (a 10 ms answer each), at least 4 and at most 256.
func (c *Config) connections() int {
	switch {
	case c.Rate == 0:
		return c.Workers
	case c.Connections > 0:
		return c.Connections
	}
	return min(max(c.Rate/100, 4), 256)
}

// progress prints the requests done every 2 s until stopped.
func progress(out io.Writer, l *loader) (stop func()) {
	tick := time.NewTicker(2 * time.Second)
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		start, last := time.Now(), uint64(0)
		for {
			select {
			case <-tick.C:
				n := l.done.Load()
				fmt.Fprintf(out, "  %5.1fs      %d requests (%.0f/s in the last 2s)\n", time.Since(start).Seconds(), n, float64(n-last)/2)
				last = n
			case <-quit:
				return
			}
		}
	}()
	return func() { tick.Stop(); close(quit); <-finished }
}

// ownCPU is the CPU time this process has used (user + system).
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func summarize(t *tally, start time.Time, batch int) Summary {
	s := Summary{Requests: t.hist.n, StatusCodes: map[string]int{}, Late: t.late, NotSent: t.notSent}
	for code, n := range t.codes {
		s.StatusCodes[strconv.Itoa(code)] = int(n)
	}
	for e, n := range t.errs {
		s.TransportFailures = append(s.TransportFailures, fmt.Sprintf("%s (%d)", e, n))
	}
	slices.Sort(s.TransportFailures)
	decided := t.codes[200] + t.codes[429]
	sent := s.Requests - s.NotSent
	if s.Requests > 0 {
		s.Decided = float64(decided) / float64(s.Requests)
		s.Allowed = float64(t.codes[200]) / float64(s.Requests)
	}
	if t.lastDone.After(start) {
		s.Duration = t.lastDone.Sub(start)
		s.Answered = float64(decided) / s.Duration.Seconds()
		s.ChecksPerSecond = s.Answered * float64(batch)
	}
	if t.lastSent.After(start) {
		s.Sent = float64(sent) / t.lastSent.Sub(start).Seconds()
	}
	s.P50, s.P99, s.P999 = t.hist.quantile(0.50), t.hist.quantile(0.99), t.hist.quantile(0.999)
	s.Max, s.Mean = t.hist.max, t.hist.mean()
	return s
}
func printSummary(out io.Writer, s Summary) {
	codes := make([]string, 0, len(s.StatusCodes))
	for code, n := range s.StatusCodes {
		label := code
		if code == "0" {
			label = "0 (no answer)"
			if s.NotSent > 0 {
				label = fmt.Sprintf("0 (no answer; %d of them not sent)", s.NotSent)
			}
		}
		codes = append(codes, fmt.Sprintf("%s: %d", label, n))
	}
	slices.Sort(codes)
	fmt.Fprintf(out, "requests      %d in %s: %.1f/s sent, %.1f/s answered with a decision (%.1f checks/s)\n",
		s.Requests, s.Duration.Round(time.Millisecond), s.Sent, s.Answered, s.ChecksPerSecond)
	fmt.Fprintf(out, "success       %.2f%% answered with a decision (200 or 429); %.2f%% allowed (200)\n", 100*s.Decided, 100*s.Allowed)
	fmt.Fprintf(out, "status codes  %s\n", strings.Join(codes, "  "))
	fmt.Fprintf(out, "latency       p50 %s  p99 %s  p999 %s  max %s  mean %s\n",
		ms(s.P50), ms(s.P99), ms(s.P999), ms(s.Max), ms(s.Mean))
	late := 0.0
	if s.Requests > 0 {
		late = 100 * float64(s.Late) / float64(s.Requests)
	}
	fmt.Fprintf(out, "late          %d requests (%.2f%%) sent more than %s after they were due (no free connection, or this command behind); latency counts from when they were due\n",
		s.Late, late, lateAfter)
	if s.Requests > 0 {
		fmt.Fprintf(out, "load CPU      %.1f µs per request, this command's own (%.2f CPU-seconds)\n",
			float64(s.LoadCPU)/float64(time.Microsecond)/float64(s.Requests), s.LoadCPU.Seconds())
	}
	if len(s.TransportFailures) > 0 {
		const show = 5
		fmt.Fprintf(out, "errors        %s\n", strings.Join(s.TransportFailures[:min(show, len(s.TransportFailures))], "; "))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
