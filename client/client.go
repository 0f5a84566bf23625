package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one otpguard deployment. Build it with New; it is safe for
// concurrent use.
type Client struct {
	base      *url.URL
	apiKey    string
	opsKey    string
	hc        *http.Client
	userAgent string
	retries   int
	backoff   time.Duration
	maxWait   time.Duration
	autoKeys  bool
	now       func() time.Time
	sleep     func(ctx context.Context, d time.Duration) error
	memory    *memory
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sets the API key sent as "Authorization: Bearer" to the API
// routes (/otp/..., /limits/check).
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithOpsKey sets the ops key sent to the /ops/... routes. Keep it out of
// the app servers that only send codes and check limits.
func WithOpsKey(key string) Option { return func(c *Client) { c.opsKey = key } }

// WithHTTPClient makes the client use hc (its Transport, its Timeout).
// The default is a client of its own on a clone of
// http.DefaultTransport with more idle connections per host.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header (default "otpguard-go").
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRetries sets how many times a retryable call is repeated (default
// 2, so at most 3 attempts) and the first backoff (default 100 ms,
// doubling, with jitter). 0 turns retries off.
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *Client) { c.retries, c.backoff = max(0, n), backoff }
}

// WithMaxRetryWait bounds one wait between attempts (default 5 s): a 503
// whose Retry-After is longer is returned to the caller at once rather
// than waited for.
func WithMaxRetryWait(d time.Duration) Option { return func(c *Client) { c.maxWait = d } }

// WithIdempotentSends gives every Send without an IdempotencyKey a fresh
// random one, so that Send is retried on network errors: otpguard answers
// a repeat with the first answer and sends one SMS.
func WithIdempotentSends() Option { return func(c *Client) { c.autoKeys = true } }

// WithDenialMemory sets how many denied keys the client remembers
// (default DefaultDenialMemory); 0 turns the memory off. See the package
// documentation for why answering from it is exact.
func WithDenialMemory(size int) Option {
	return func(c *Client) {
		c.memory = nil
		if size > 0 {
			c.memory = newMemory(size)
		}
	}
}

// WithClock gives the denied-key memory its time (time.Now by default):
// for tests and simulations.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// DefaultDenialMemory is how many denied keys a Client remembers unless
// WithDenialMemory says otherwise (about 200 bytes each).
const DefaultDenialMemory = 10_000

// maxBody bounds what is read of one response: otpguard's largest answers
// (a page of 1,000 audit events) are far below it.
const maxBody = 8 << 20

// New returns a client of the otpguard at baseURL (e.g.
// "http://otpguard.internal:8080"). It makes no request.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("otpguard: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("otpguard: base URL %q: want http(s)://host[:port]", baseURL)
	}
	c := &Client{
		base: u, userAgent: "otpguard-go", retries: 2, backoff: 100 * time.Millisecond,
		maxWait: 5 * time.Second, now: time.Now, sleep: sleepCtx,
		memory: newMemory(DefaultDenialMemory),
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64 // one app server talks to one otpguard, hard
		c.hc = &http.Client{Transport: t}
	}
	return c, nil
}

// call is one API call.
type call struct {
	method, path string
	query        url.Values
	body         any // JSON-encoded when not nil
	ops          bool
	header       http.Header
	retry        bool // safe to repeat
}

// reply is what a call got back.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// do runs c, retrying when it is safe, and returns the answer when its
// status is in ok; any other answer is an *Error.
func (c *Client) do(ctx context.Context, cl call, ok ...int) (*reply, error) {
	var payload []byte
	if cl.body != nil {
		b, err := json.Marshal(cl.body)
		if err != nil {
			return nil, fmt.Errorf("otpguard: %s %s: encode: %w", cl.method, cl.path, err)
		}
		payload = b
	}
	wait := c.backoff
	for attempt := 0; ; attempt++ {
		r, err := c.once(ctx, cl, payload)
		if err == nil {
			for _, s := range ok {
				if r.status == s {
					return r, nil
				}
			}
			err = problemOf(r)
		}
		if !cl.retry || attempt >= c.retries || !retryable(err) {
			return r, err
		}
		d := jitter(wait)
		var e *Error
		if errors.As(err, &e) && e.RetryAfter > d {
			d = e.RetryAfter
		}
		if d > c.maxWait {
			return r, err
		}
		if dl, has := ctx.Deadline(); has && time.Until(dl) < d {
			return r, err // no time left to wait and ask again
		}
		if serr := c.sleep(ctx, d); serr != nil {
			return r, err
		}
		wait *= 2
	}
}

// once sends one request and reads its answer.
func (c *Client) once(ctx context.Context, cl call, payload []byte) (*reply, error) {
	// cl.path is escaped already (url.PathEscape of its variable parts).
	target := c.base.String() + cl.path
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, target, body)
	if err != nil {
		return nil, fmt.Errorf("otpguard: %s %s: %w", cl.method, cl.path, err)
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	key := c.apiKey
	if cl.ops {
		key = c.opsKey
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, &transportError{op: cl.method + " " + cl.path, err: err}
	}
	defer func() {
		// Read what is left, within a bound, so the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
	}()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return nil, &transportError{op: cl.method + " " + cl.path, err: err}
	}
	return &reply{status: res.StatusCode, header: res.Header, body: b}, nil
}

// transportError is a request that got no answer: the network, a
// deadline, a cut connection.
type transportError struct {
	op  string
	err error
}

func (e *transportError) Error() string { return "otpguard: " + e.op + ": " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// retryable says whether asking again may help: no answer at all (but not
// the caller's own deadline or cancellation), a 503 that says when, or a
// send whose first copy is still in flight.
func retryable(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch {
	case e.Status == http.StatusServiceUnavailable && e.RetryAfter > 0:
		return true
	case e.Code == CodeIdempotencyKeyInProgress:
		return true
	}
	return false
}

// jitter spreads d over [d/2, d) so that many clients refused together do
// not come back together.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decode reads r's JSON body into v.
func (r *reply) decode(v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("otpguard: answer %d is not the JSON expected: %w", r.status, err)
	}
	return nil
}

// retryAfter reads a Retry-After header in seconds (otpguard never sends
// the date form; it is read too).
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}
