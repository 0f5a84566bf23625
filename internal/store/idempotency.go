package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// Idempotency keys (httpapi/idempotency.go). One hash per caller and key,
// og:idem:{<digest>}:r, where the digest (made by the caller of these
// methods) hides both the caller's API key and its Idempotency-Key:
//
//	s  "p" while the first request runs, "d" once its answer is stored
//	b  the digest of the first request's method, path and body
//	t  the claim token of the request running (while "p")
//	r  the stored answer (opaque bytes), once "d"
//
// A claim lives for the pending TTL (longer than any request may run), so
// a crashed instance frees its keys; an answer lives for the answer TTL
// (24 h) from when it was stored.

// The states ClaimIdempotencyKey finds.
const (
	IdempotencyClaimed = "claimed" // the caller owns the key now: run the request
	IdempotencyPending = "pending" // another request with the same body runs
	IdempotencyReused  = "reused"  // the key was used with another body
	IdempotencyDone    = "done"    // the answer is stored: replay it
)

// claimIdempotencyScript claims KEYS[1] for a request with body digest
// ARGV[1] and token ARGV[2] for ARGV[3] ms, or says what holds it
// (lua/claim_idempotency_key.lua).
var claimIdempotencyScript = script("claim_idempotency_key")

// finishIdempotencyScript stores the answer ARGV[2] for ARGV[3] ms, if the
// claim KEYS[1] is still the token ARGV[1]'s (it may have expired and been
// claimed again) (lua/finish_idempotency_key.lua).
var finishIdempotencyScript = script("finish_idempotency_key")

// releaseIdempotencyScript frees the claim KEYS[1] of token ARGV[1]
// (lua/release_idempotency_key.lua).
var releaseIdempotencyScript = script("release_idempotency_key")

// IdempotencyKeys keeps the Idempotency-Keys' claims and answers.
type IdempotencyKeys struct{ keyspace }

// recordKey is the hash of the key whose digest is digest.
func (r *IdempotencyKeys) recordKey(digest string) string {
	return r.key(limit.Key{Space: "idem", ID: digest, Name: "r"})
}

// ClaimIdempotencyKey claims digest for a request whose body digest is
// body, under token, for pending; or returns the state that holds it and,
// when done, the stored answer.
func (r *IdempotencyKeys) ClaimIdempotencyKey(ctx context.Context, digest, body, token string, pending time.Duration) (string, []byte, error) {
	v, err := claimIdempotencyScript.Run(ctx, r.rdb, []string{r.recordKey(digest)}, body, token, pending.Milliseconds()).Slice()
	if err != nil {
		return "", nil, fmt.Errorf("store: claim idempotency key: %w", err)
	}
	return claimReply(v)
}

// claimReply reads claimIdempotencyScript's reply: {state} or {"done",
// answer}.
func claimReply(v []any) (string, []byte, error) {
	if len(v) == 0 {
		return "", nil, errors.New("store: claim idempotency key: empty reply")
	}
	state, ok := v[0].(string)
	if !ok {
		return "", nil, fmt.Errorf("store: claim idempotency key: unexpected reply %T", v[0])
	}
	if state != IdempotencyDone {
		return state, nil, nil
	}
	if len(v) != 2 {
		return "", nil, fmt.Errorf("store: claim idempotency key: %d values, want 2", len(v))
	}
	answer, ok := v[1].(string)
	if !ok {
		return "", nil, fmt.Errorf("store: claim idempotency key: unexpected answer %T", v[1])
	}
	return state, []byte(answer), nil
}

// FinishIdempotencyKey stores the answer of the claim token for ttl.
// Returns false when the claim was no longer token's.
func (r *IdempotencyKeys) FinishIdempotencyKey(ctx context.Context, digest, token string, answer []byte, ttl time.Duration) (bool, error) {
	n, err := finishIdempotencyScript.Run(ctx, r.rdb, []string{r.recordKey(digest)}, token, answer, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("store: store idempotent answer: %w", err)
	}
	return n == 1, nil
}

// ReleaseIdempotencyKey frees the claim token, keeping no answer.
func (r *IdempotencyKeys) ReleaseIdempotencyKey(ctx context.Context, digest, token string) error {
	if err := releaseIdempotencyScript.Run(ctx, r.rdb, []string{r.recordKey(digest)}, token).Err(); err != nil {
		return fmt.Errorf("store: release idempotency key: %w", err)
	}
	return nil
}
