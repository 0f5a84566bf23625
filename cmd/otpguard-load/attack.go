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
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// maxExact bounds the latencies kept for exact quantiles (80 MB).
const maxExact = 10_000_000

// Summary is what an attack measured.
type Summary struct {
	Requests          uint64
	Duration          time.Duration // from the first request sent to the last answer
	Sent              float64       // requests per second sent
	Answered          float64       // requests per second answered with a decision (200 or 429)
	ChecksPerSecond   float64       // Answered x checks per request
	Decided           float64       // share of requests answered with a decision
	Allowed           float64       // share answered 200
	StatusCodes       map[string]int
	P50, P99, P999    time.Duration
	Max, Mean         time.Duration
	TransportFailures []string
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

// targeter hands vegeta's workers one request each; it is called from
// many goroutines at once.
func (c *Config) targeter() vegeta.Targeter {
	var n, sends atomic.Uint64
	url, sendURL, hdr := c.URL+"/limits/check", c.URL+"/otp/send", c.header()
	return func(t *vegeta.Target) error {
		i := n.Add(1) - 1
		t.Method, t.URL, t.Header = http.MethodPost, url, hdr
		if c.isSend(i) {
			t.URL, t.Body = sendURL, c.sendBody(sends.Add(1)-1)
			return nil
		}
		t.Body = c.body(i)
		return nil
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

// attack runs vegeta for c.Duration and prints progress and a summary.
func attack(ctx context.Context, c *Config, out io.Writer) (Summary, error) {
	if err := preflight(ctx, c, out); err != nil {
		return Summary{}, err
	}
	opts := []func(*vegeta.Attacker){
		vegeta.Timeout(c.Timeout),
		vegeta.KeepAlive(true),
		vegeta.MaxBody(0), // the decision's body is not needed; its status is
		vegeta.Redirects(vegeta.NoFollow),
		vegeta.Workers(uint64(c.Workers)),
		vegeta.MaxConnections(c.Connections),
	}
	pace := vegeta.Rate{Freq: c.Rate, Per: time.Second}
	what := fmt.Sprintf("at %d/s", c.Rate)
	if c.Rate == 0 { // vegeta's max-rate mode: a fixed pool of workers, each sending as soon as it is answered
		opts = append(opts, vegeta.MaxWorkers(uint64(c.Workers)))
		what = fmt.Sprintf("as fast as possible with %d workers", c.Workers)
	}
	before, merr := serverMetrics(ctx, c.URL)
	if merr != nil {
		fmt.Fprintf(out, "note          cannot read %s/metrics (%v): no server figures\n", c.URL, merr)
	}
	a := vegeta.NewAttacker(opts...)
	conns := "unbounded"
	if c.Connections > 0 {
		conns = strconv.Itoa(c.Connections)
	}
	fmt.Fprintf(out, "attacking     %s/limits/check %s for %s (policy %q, %d keys %s*, %d check(s) per request, cost %d, connections %s)\n",
		c.URL, what, c.Duration, c.Policy, c.Keys, c.KeyPrefix, c.Batch, c.Cost, conns)

	var m vegeta.Metrics
	sendCodes := map[uint16]int{}
	// Exact quantiles from every latency, up to maxExact requests; beyond,
	// vegeta's t-digest estimate.
	var lat []time.Duration
	results := a.Attack(c.targeter(), pace, c.Duration, "otpguard-load")
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	start, last := time.Now(), uint64(0)
	stopped := false
loop:
	for {
		select {
		case r, ok := <-results:
			if !ok {
				break loop
			}
			m.Add(r)
			if c.SendShare > 0 && strings.HasSuffix(r.URL, "/otp/send") {
				sendCodes[r.Code]++
			}
			if len(lat) < maxExact {
				lat = append(lat, r.Latency)
			}
		case <-tick.C:
			n := m.Requests
			fmt.Fprintf(out, "  %5.1fs      %d requests (%.0f/s in the last 2s)\n", time.Since(start).Seconds(), n, float64(n-last)/2)
			last = n
		case <-ctx.Done():
			if !stopped {
				fmt.Fprintln(out, "interrupted: stopping the attack")
				a.Stop()
				stopped = true
			}
		}
	}
	m.Close()
	s := summarize(&m, lat, c.Batch)
	printSummary(out, s)
	if c.SendShare > 0 {
		printSends(out, sendCodes)
	}
	if merr == nil {
		if after, err := serverMetrics(context.WithoutCancel(ctx), c.URL); err == nil {
			printServerFigures(out, before, after, s.Answered*s.Duration.Seconds())
		}
	}
	return s, nil
}

func summarize(m *vegeta.Metrics, lat []time.Duration, batch int) Summary {
	s := Summary{Requests: m.Requests, Duration: m.Duration + m.Wait, Sent: m.Rate, StatusCodes: m.StatusCodes}
	decided := m.StatusCodes["200"] + m.StatusCodes["429"]
	if m.Requests > 0 {
		s.Decided = float64(decided) / float64(m.Requests)
		s.Allowed = float64(m.StatusCodes["200"]) / float64(m.Requests)
	}
	if secs := s.Duration.Seconds(); secs > 0 {
		s.Answered = float64(decided) / secs
		s.ChecksPerSecond = s.Answered * float64(batch)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if uint64(len(lat)) < m.Requests || len(lat) == 0 {
			return m.Latencies.Quantile(p)
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	s.P50, s.P99, s.P999 = q(0.50), q(0.99), q(0.999)
	s.Max = m.Latencies.Max
	s.Mean = m.Latencies.Mean
	for _, e := range m.Errors {
		if !startsWithStatus(e) { // "429 Too Many Requests" is a decision, counted under status codes
			s.TransportFailures = append(s.TransportFailures, e)
		}
	}
	return s
}

func startsWithStatus(e string) bool {
	code, _, _ := strings.Cut(e, " ")
	n, err := strconv.Atoi(code)
	return err == nil && n >= 100 && n < 600
}

func printSummary(out io.Writer, s Summary) {
	codes := make([]string, 0, len(s.StatusCodes))
	for code, n := range s.StatusCodes {
		label := code
		if code == "0" {
			label = "0 (no answer)"
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
	if len(s.TransportFailures) > 0 {
		const show = 5
		fmt.Fprintf(out, "errors        %s\n", strings.Join(s.TransportFailures[:min(show, len(s.TransportFailures))], "; "))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
