package httpapi

// The answers of idempotent requests: which are kept and for how long,
// how they are recorded whole before they are stored, and how a retry gets
// them back. The claims they are kept under are in idempotency.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// storedAnswer is an answer as kept in the store.
type storedAnswer struct {
	Status int               `json:"s"`
	Header map[string]string `json:"h,omitempty"`
	Body   []byte            `json:"b"`
}

// replayedHeaders are the headers of an answer kept with it; the others
// (the request ID) belong to each request.
var replayedHeaders = []string{echo.HeaderContentType, "Retry-After", "RateLimit", "RateLimit-Policy", echo.HeaderCacheControl}

// causeCanEnd are the refusals whose cause ends at a time nobody can say:
// a deny entry or a pause expires or is removed, a reload changes the
// policy, the caller solves the challenge. Replaying them would outlast
// their cause.
var causeCanEnd = map[problem.Code]bool{
	problem.CodeDenied: true, problem.CodeCountryPaused: true, problem.CodeCarrierPaused: true, problem.CodeCountryNotAllowed: true,
	problem.CodeNumberTypeNotAllowed: true, problem.CodeChallengeRequired: true, problem.CodeOverrideLooser: true,
	problem.CodeHighRiskNumber: true, // an operator may clear the score
}

// keepFor says how long an answer with status, from the handler's err, is
// kept for replay: 0 not at all.
func keepFor(status int, err error) time.Duration {
	var ge *problem.Error
	switch {
	case status >= 200 && status < 300:
		return IdempotencyTTL
	case status == http.StatusBadRequest, status == http.StatusForbidden, status == http.StatusRequestTimeout,
		status == http.StatusConflict, status == http.StatusPreconditionRequired,
		status == http.StatusTooManyRequests, status == httpx.StatusClientClosed:
		return 0
	case errors.As(err, &ge) && causeCanEnd[ge.Code]:
		return 0
	case errors.As(err, &ge) && ge.RetryAfter > 0:
		return min(IdempotencyRefusalTTL, ge.RetryAfter)
	case status >= 400 && status < 500:
		return IdempotencyRefusalTTL
	}
	return 0
}

// keepAnswer sends the answer rec holds (none when nil: sent already) and
// then keeps it under cl's claim, or releases the claim (runClaimed).
func (m *idempotency) keepAnswer(c echo.Context, rec *answerRecorder, cl idemClaim, err error) error {
	if err != nil {
		// Written now, to be recorded; the error goes on to the request
		// log, and echo's handler, seeing the answer written, writes none.
		c.Error(err)
	}
	rec.send()
	c.Response().Writer = rec.ResponseWriter
	return m.keep(c, rec.body.Bytes(), cl, err)
}

// keep keeps body, the answer sent, under cl's claim, or releases it.
func (m *idempotency) keep(c echo.Context, body []byte, cl idemClaim, err error) error {
	ctx := context.WithoutCancel(c.Request().Context())
	status := c.Response().Status
	// A success is kept even when the caller has gone: the send it
	// answers is done (the SMS left), and the caller's retry must get it.
	// Any other answer of a request cut short may be the cut's.
	finished := c.Request().Context().Err() == nil || status >= 200 && status < 300
	if ttl := keepFor(status, err); ttl > 0 && len(body) <= maxStoredAnswer && finished && m.mayKeep(ctx, status, cl.caller) {
		a := storedAnswer{Status: status, Header: map[string]string{}, Body: body}
		for _, h := range replayedHeaders {
			if v := c.Response().Header().Get(h); v != "" {
				a.Header[h] = v
			}
		}
		b, merr := json.Marshal(a)
		if merr == nil {
			ok, ferr := m.store.FinishIdempotencyKey(ctx, cl.digest, cl.token, b, ttl)
			switch {
			case ferr != nil:
				// The claim expires (IdempotencyPendingTTL); until then a
				// retry is 409.
				m.log.WarnContext(ctx, "storing an idempotent answer failed", "err", ferr)
			case !ok:
				m.log.WarnContext(ctx, "an idempotency claim expired before its answer was stored")
			}
			return err
		}
	}
	if rerr := m.store.ReleaseIdempotencyKey(ctx, cl.digest, cl.token); rerr != nil {
		m.log.WarnContext(ctx, "releasing an idempotency key failed", "err", rerr)
	}
	return err
}

// mayKeep: a success is always kept; a 4xx only within the caller's
// hourly cap (IdempotencyKept4xxPerHour). When the count cannot be taken
// the 4xx is not kept: nothing is lost but a replay of a refusal.
func (m *idempotency) mayKeep(ctx context.Context, status int, caller string) bool {
	if status < 400 {
		return true
	}
	ok, err := m.store.TakeKept4xx(ctx, caller, IdempotencyKept4xxPerHour)
	return err == nil && ok
}

// replay writes a stored answer.
func replay(c echo.Context, stored []byte) error {
	var a storedAnswer
	if err := json.Unmarshal(stored, &a); err != nil {
		return err
	}
	h := c.Response().Header()
	for k, v := range a.Header {
		h.Set(k, v)
	}
	h.Set(HeaderIdempotentReplayed, "true")
	body := a.Body
	if strings.HasPrefix(a.Header[echo.HeaderContentType], "application/problem+json") {
		// A problem names the request answered: this one, as its header does.
		var p httpx.Problem
		if err := json.Unmarshal(a.Body, &p); err == nil {
			p.RequestID = httpx.RequestID(c)
			var b bytes.Buffer
			if httpx.WriteJSON(&b, p) == nil {
				body = b.Bytes()
			}
		}
	}
	c.Response().WriteHeader(a.Status)
	_, err := c.Response().Write(body)
	return err
}

// answerRecorder holds what the handler writes, status and body, until
// send passes it on whole: with its Content-Length, so that the caller
// has all of it once flushed, before the answer is stored (runClaimed).
// The answers of these routes are small JSON.
type answerRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *answerRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *answerRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// Flush holds on: the answer is flushed whole by send.
func (r *answerRecorder) Flush() {}

// send writes the held answer and flushes it to the caller.
func (r *answerRecorder) send() {
	if r.status == 0 {
		return // nothing was written: echo answers as for any handler
	}
	if r.status >= http.StatusOK && r.status != http.StatusNoContent && r.status != http.StatusNotModified {
		r.ResponseWriter.Header().Set(echo.HeaderContentLength, strconv.Itoa(r.body.Len()))
	}
	r.ResponseWriter.WriteHeader(r.status)
	_, _ = r.ResponseWriter.Write(r.body.Bytes())
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}
