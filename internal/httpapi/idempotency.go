package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/opsweb"
	"github.com/otpguard/otpguard/internal/problem"
)

// Idempotent requests (README.md, "Idempotent sends and the verification
// lifecycle"). A POST that carries an Idempotency-Key header is run once
// per caller, key and body: the first request claims the key in Redis (one
// script, so exactly one of any number of concurrent requests on any
// instances claims it), runs, and stores its answer (status, body and the
// headers that describe it) for IdempotencyTTL. A later request with the
// same key and body gets that answer again with Idempotent-Replayed: true
// and runs nothing (a problem's request_id is this request's); with
// another body, 422 idempotency_key_reused. A request that finds the key
// claimed by one still running waits for its answer, up to
// IdempotencyWait (or its own deadline), then answers 409
// idempotency_key_in_progress with Retry-After: 1.
//
// Kept: 2xx for IdempotencyTTL. A refusal is kept no longer than its
// cause lasts (keepFor): not kept when it says "try again" (408, 409,
// 429), when the request was malformed (400: no side effect to repeat),
// or when its cause can end at a time nobody can say (a deny entry or a
// pause that expires or is removed, a policy a reload changes, a
// challenge the caller solves); other 4xx (404, 422 invalid_destination)
// for IdempotencyRefusalTTL at most, and at most IdempotencyKept4xxPerHour
// of them per caller, so free refusals cannot fill Redis. Not kept: 5xx
// (store_unavailable, overloaded, provider_unavailable...): the claim is
// released, so a retry with the same key runs afresh. While Redis cannot
// be reached the key cannot be claimed: the request runs as one without a
// key (its own policy decides it) and its answer is not kept.

// The header names.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

const (
	// IdempotencyTTL is how long an answer is kept, from when it was stored.
	IdempotencyTTL = 24 * time.Hour
	// IdempotencyPendingTTL bounds a claim whose request never finished
	// (its instance died): longer than the server's 30 s write timeout, so
	// no request still running loses its claim.
	IdempotencyPendingTTL = time.Minute
	// DefaultIdempotencyWait is how long a request waits for the answer of
	// the same request running elsewhere (Options.IdempotencyWait).
	DefaultIdempotencyWait = 10 * time.Second
	// IdempotencyRefusalTTL is how long a kept 4xx answer is kept: a
	// client's retry comes within minutes.
	IdempotencyRefusalTTL = time.Hour
	// IdempotencyKept4xxPerHour caps the 4xx answers kept per caller
	// (API key or ops session) per hour; past it a 4xx is answered and not
	// kept.
	IdempotencyKept4xxPerHour = 100
	// maxIdempotencyKey is the longest key taken, in bytes.
	maxIdempotencyKey = 255
	// maxStoredAnswer: a larger answer body is not kept (none of the
	// routes' answers comes near it).
	maxStoredAnswer = 16 << 10
)

// IdempotencyStore keeps the claims and answers of idempotent requests
// (store.Redis, through the Fallback's breaker). digest names the caller
// and key; body is the digest of the request.
type IdempotencyStore interface {
	// ClaimIdempotencyKey claims digest for token, or returns the state
	// that holds it (store.Idempotency*) and, when done, the answer.
	ClaimIdempotencyKey(ctx context.Context, digest, body, token string, pending time.Duration) (state string, answer []byte, err error)
	// FinishIdempotencyKey stores the answer of token's claim.
	FinishIdempotencyKey(ctx context.Context, digest, token string, answer []byte, ttl time.Duration) (bool, error)
	// ReleaseIdempotencyKey frees token's claim without an answer.
	ReleaseIdempotencyKey(ctx context.Context, digest, token string) error
	// TakeKept4xx counts one more kept 4xx answer of caller (a digest)
	// in a fixed window of an hour, and says whether it is within limit.
	TakeKept4xx(ctx context.Context, caller string, limit int64) (bool, error)
}

// validIdempotencyKey: 1 to 255 printable ASCII characters.
func validIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > maxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// SendClaimer is an IdempotencyStore whose claims can ride in a send's
// first round trip (guard.SendClaim): true on a single Redis; on Redis
// Cluster a MULTI holds one hash slot, and the key's is not the limits'.
type SendClaimer interface {
	ClaimsInSend() bool
}

// idempotency is the Idempotency-Key middleware: a request's claim, the
// wait for the same request running elsewhere, and its kept answer
// (idempotency_answer.go).
type idempotency struct {
	store IdempotencyStore // nil: the header is ignored
	wait  time.Duration
	log   *slog.Logger
}

// idempotent makes a route idempotent under an Idempotency-Key header. It
// runs after the credential check: the key is scoped to the caller's API
// or ops key (or ops session).
func (m *idempotency) idempotent(next echo.HandlerFunc) echo.HandlerFunc {
	return m.idempotentRoute(next, false)
}

// idempotentSend is idempotent for POST /otp/send: where the store can,
// the claim goes with the send's limits (runInSend).
func (m *idempotency) idempotentSend(next echo.HandlerFunc) echo.HandlerFunc {
	sc, ok := m.store.(SendClaimer)
	return m.idempotentRoute(next, ok && sc.ClaimsInSend())
}

func (m *idempotency) idempotentRoute(next echo.HandlerFunc, inSend bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		values := c.Request().Header.Values(HeaderIdempotencyKey)
		if len(values) == 0 || m.store == nil {
			return next(c)
		}
		if len(values) != 1 || !validIdempotencyKey(values[0]) {
			return problem.Errorf(problem.CodeInvalidIdempotencyKey, "Idempotency-Key must be one header of 1 to %d printable ASCII characters", maxIdempotencyKey)
		}
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err // too large: the body limit's 413
		}
		c.Request().Body = io.NopCloser(bytes.NewReader(body))
		// The caller: its bearer key, or (ops page) its session.
		token, ok := httpx.Bearer(c)
		if ck, err := c.Cookie(opsweb.SessionCookie); !ok && err == nil {
			token = "session:" + ck.Value
		}
		digest, caller := idempotencyDigest(token, values[0]), callerDigest(token)
		sum := sha256.Sum256([]byte(c.Request().Method + " " + c.Path() + "\n" + string(body)))
		bodySum := hex.EncodeToString(sum[:])
		cl := idemClaim{digest: digest, caller: caller, token: newClaimToken(), body: body}
		if inSend {
			return m.runInSend(c, next, cl, bodySum)
		}
		return m.claimAndRun(c, next, cl, bodySum)
	}
}

// idemClaim is one request's claim: the key's digest, the caller's, the
// claim token, and the request's body (to run the handler again, after a
// send that lost its claim read it: runInSend).
type idemClaim struct {
	digest, caller, token string
	body                  []byte
}

// rewind gives the request its body again, for the handler to read.
func (cl idemClaim) rewind(c echo.Context) {
	c.Request().Body = io.NopCloser(bytes.NewReader(cl.body))
}

func (m *idempotency) claimAndRun(c echo.Context, next echo.HandlerFunc, cl idemClaim, bodySum string) error {
	ctx := c.Request().Context()
	state, answer, err := m.store.ClaimIdempotencyKey(ctx, cl.digest, bodySum, cl.token, IdempotencyPendingTTL)
	if err != nil {
		return m.unclaimed(c, next, err)
	}
	if state == "claimed" {
		return m.runClaimed(c, next, cl)
	}
	return m.answerHeld(c, next, cl, bodySum, state, answer)
}

// answerHeld answers a request whose key another holds (state): 422 for
// another body, the kept answer, or (pending) that answer once stored,
// polling the store, claiming the key if it is freed meanwhile.
func (m *idempotency) answerHeld(c echo.Context, next echo.HandlerFunc, cl idemClaim, bodySum, state string, answer []byte) error {
	ctx := c.Request().Context()
	deadline := time.Now().Add(m.wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	pause := 5 * time.Millisecond
	for {
		switch state {
		case "claimed":
			cl.rewind(c)
			return m.runClaimed(c, next, cl)
		case "reused":
			return problem.Errorf(problem.CodeIdempotencyKeyReused, "this Idempotency-Key was used with another request body")
		case "done":
			return replay(c, answer)
		}
		// pending: the same request runs elsewhere; wait for its answer.
		if !time.Now().Add(pause).Before(deadline) {
			return &problem.Error{Code: problem.CodeIdempotencyKeyInProgress, RetryAfter: time.Second,
				Message: "a request with this Idempotency-Key is still running; retry shortly"}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
		var err error
		state, answer, err = m.store.ClaimIdempotencyKey(ctx, cl.digest, bodySum, cl.token, IdempotencyPendingTTL)
		if err != nil {
			cl.rewind(c)
			return m.unclaimed(c, next, err)
		}
	}
}

// unclaimed runs a request whose key could not be claimed (err).
func (m *idempotency) unclaimed(c echo.Context, next echo.HandlerFunc, err error) error {
	ctx := c.Request().Context()
	if errors.Is(err, problem.ErrOverloaded) {
		return problem.Overloaded(err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Redis is away: run as without a key (the route's policy decides),
	// keeping nothing.
	m.log.Log(ctx, limit.StoreFailureLevel(err), "idempotency key not claimed: running without it", "err", err)
	return next(c)
}

// runClaimed runs the request that claimed the key and keeps or releases
// its answer.
//
// The answer leaves before it is kept: the handler's answer is held
// (answerRecorder), sent whole with its Content-Length and flushed, and
// only then stored, so the caller does not wait on that round trip. On a
// crash between the two the claim expires unanswered
// (IdempotencyPendingTTL) and a retry after that runs again: but a caller
// retries only when it got no answer, and this one had it; a caller cut
// off before the answer was in the same place before, when the store came
// after the SMS left and before the answer. A duplicate arriving meanwhile
// finds the claim pending and waits for the stored answer, as it did.
// (Over HTTP/2 the stream ends when the handler returns: a client that
// waits for its end, not for Content-Length bytes, still waits on the
// store.)
func (m *idempotency) runClaimed(c echo.Context, next echo.HandlerFunc, cl idemClaim) error {
	rec := &answerRecorder{ResponseWriter: c.Response().Writer}
	c.Response().Writer = rec
	return m.keepAnswer(c, rec, cl, next(c))
}

// runInSend runs a send with its claim in the send's first round trip
// (guard.SendClaim), and answers by the claim's fate: this request's
// answer, kept or released, as runClaimed; another's (answerHeld), the
// send having given back what it counted; or, with no claim made, the
// answer as without a key. A send that ended before its limits (a
// malformed number, a deny entry) made none: its answer, if one that is
// kept, is claimed and stored after it left; one Redis could not take is
// not kept, as when a claim cannot reach Redis.
func (m *idempotency) runInSend(c echo.Context, next echo.HandlerFunc, cl idemClaim, bodySum string) error {
	sc := &guard.SendClaim{Digest: cl.digest, Body: bodySum, Token: cl.token, Pending: IdempotencyPendingTTL,
		Separate: func(ctx context.Context) (string, []byte, error) {
			return m.store.ClaimIdempotencyKey(ctx, cl.digest, bodySum, cl.token, IdempotencyPendingTTL)
		}}
	req := c.Request()
	c.SetRequest(req.WithContext(guard.WithSendClaim(req.Context(), sc)))
	rec := &answerRecorder{ResponseWriter: c.Response().Writer}
	c.Response().Writer = rec
	err := next(c)
	c.SetRequest(req)
	state, answer, tried, reached := sc.Outcome()
	switch {
	case tried && state == guard.ClaimClaimed:
		return m.keepAnswer(c, rec, cl, err)
	case tried:
		c.Response().Writer = rec.ResponseWriter // nothing written: the send returned ClaimLost
		return m.answerHeld(c, next, cl, bodySum, state, answer)
	}
	if err != nil {
		c.Error(err) // into rec: not sent yet
	}
	if reached || keepFor(rec.status, err) == 0 {
		rec.send()
		c.Response().Writer = rec.ResponseWriter
		return err
	}
	// A refusal before the limits that is kept (422 invalid_destination):
	// the key is claimed now (its one round trip), and a kept answer
	// replayed instead.
	state, answer, cerr := m.store.ClaimIdempotencyKey(req.Context(), cl.digest, bodySum, cl.token, IdempotencyPendingTTL)
	if cerr != nil || state == guard.ClaimClaimed {
		rec.send()
		c.Response().Writer = rec.ResponseWriter
		if cerr != nil {
			return err // not kept, as when a claim cannot reach Redis
		}
		return m.keep(c, rec.body.Bytes(), cl, err)
	}
	c.Response().Writer = rec.ResponseWriter // rec's answer is dropped
	resp := c.Response()
	resp.Committed, resp.Status, resp.Size = false, 0, 0
	return m.answerHeld(c, next, cl, bodySum, state, answer)
}

// idempotencyDigest names a caller's key in the store: the API key and the
// Idempotency-Key, hashed, so neither is stored.
func idempotencyDigest(apiKey, key string) string {
	caller := sha256.Sum256([]byte(apiKey))
	h := sha256.New()
	h.Write([]byte("otpguard idempotency v1\x00"))
	h.Write(caller[:])
	h.Write([]byte(key))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18])
}

// callerDigest names a caller in the store (its 4xx cap), hashed.
func callerDigest(apiKey string) string {
	h := sha256.New()
	h.Write([]byte("otpguard idempotency caller v1\x00"))
	h.Write([]byte(apiKey))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18])
}

func newClaimToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
