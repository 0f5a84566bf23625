// Package client calls otpguard from Go: sending and checking one-time
// codes, the verification resource, limit checks (one or a batch in one
// round trip) and the ops JSON API. It uses only the standard library.
//
// One Client is safe for concurrent use and should be shared: it keeps one
// http.Client, so connections are reused (every response body is read to
// its end, within a bound, and closed).
//
// # Errors
//
// A refusal is an RFC 9457 problem details body; the client returns it as
// an *Error carrying otpguard's stable Code, the HTTP status and the
// Retry-After. Switch on the code, never on the text:
//
//	_, err := c.Send(ctx, client.SendRequest{Phone: "+919800000000"})
//	if client.IsCode(err, client.CodeCooldown) { ... }
//	var e *client.Error
//	if errors.As(err, &e) && e.RetryAfter > 0 { ... }
//
// A denied limit check is not an error: otpguard answers 429 with the
// decisions, and Check returns them with Allowed false.
//
// # Retries
//
// Only what is safe to repeat is retried: GET requests, Send when it
// carries an idempotency key (SendRequest.IdempotencyKey, or a fresh key
// per call with WithIdempotentSends), and Deny and AddOverride, which
// always carry one (the caller's, or a fresh one per call), because
// otpguard then answers a repeat with the first answer and sends no
// second SMS or adds no second entry. Verify, checks, cancel and the ops
// DELETE calls count or change something and are never retried. A retry follows a network error, a 503 with
// Retry-After or a 409 idempotency_key_in_progress, at most
// WithRetries(n) times, with backoff (at least the Retry-After), and only
// while the context's deadline leaves time for the wait.
//
// # Denied-key memory
//
// A limit check denied with a retry time is remembered by the client
// until that time, so a key that keeps hammering a denied limit costs no
// round trip: Check answers from memory (Decision.Mode ModeClientMemory).
// This is exact, not a cache that may be stale: otpguard's limits spend
// only when they allow, so
//
//   - a fixed window that denied cost c stays at a count above limit - c
//     until the window resets (others can only add to it), so every cost
//     of c or more is denied until then;
//   - a token bucket that denied cost c holds fewer than c tokens until
//     its retry_after has passed (others can only take more), so every
//     cost of c or more is denied until then.
//
// A lower cost may be allowed sooner and is always asked of otpguard. The
// remembered time is counted from when the request was sent, before
// otpguard decided, less otpguard's rounding to whole milliseconds, so it
// never ends after otpguard's own. Denials decided in fallback (Redis not
// answering) or sync mode are not remembered, and the memory is cleared
// when otpguard reports a decision in fallback or store_unavailable: a
// Redis that comes back empty has started its limits over. Raising a
// policy's limit (a reload) is seen once the remembered denials expire.
package client
