package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
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
// ARGV[1] and token ARGV[2] for ARGV[3] ms, or says what holds it:
// {state} or {"done", answer}. One script: of any number of concurrent
// requests, on any instances, exactly one claims a free key.
var claimIdempotencyScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 'b', 'r')
if not r[1] then
  redis.call('HSET', KEYS[1], 's', 'p', 'b', ARGV[1], 't', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if r[2] ~= ARGV[1] then return {'reused'} end
if r[1] == 'p' then return {'pending'} end
return {'done', r[3]}
`)

// finishIdempotencyScript stores the answer ARGV[2] for ARGV[3] ms, if the
// claim KEYS[1] is still the token ARGV[1]'s (it may have expired and been
// claimed again). Returns 1 stored, 0 not.
var finishIdempotencyScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', 'd', 'r', ARGV[2])
redis.call('HDEL', KEYS[1], 't')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// releaseIdempotencyScript frees the claim KEYS[1] of token ARGV[1]: the
// request's answer is not kept (a 5xx, a 429), so a retry runs afresh.
var releaseIdempotencyScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`)

func (r *Redis) idempotencyKey(digest string) string {
	return r.key(guard.Key{Space: "idem", ID: digest, Name: "r"})
}

// ClaimIdempotencyKey claims digest for a request whose body digest is
// body, under token, for pending; or returns the state that holds it and,
// when done, the stored answer.
func (r *Redis) ClaimIdempotencyKey(ctx context.Context, digest, body, token string, pending time.Duration) (string, []byte, error) {
	v, err := claimIdempotencyScript.Run(ctx, r.rdb, []string{r.idempotencyKey(digest)}, body, token, pending.Milliseconds()).Slice()
	if err != nil {
		return "", nil, fmt.Errorf("store: claim idempotency key: %w", err)
	}
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
func (r *Redis) FinishIdempotencyKey(ctx context.Context, digest, token string, answer []byte, ttl time.Duration) (bool, error) {
	n, err := finishIdempotencyScript.Run(ctx, r.rdb, []string{r.idempotencyKey(digest)}, token, answer, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("store: store idempotent answer: %w", err)
	}
	return n == 1, nil
}

// ReleaseIdempotencyKey frees the claim token, keeping no answer.
func (r *Redis) ReleaseIdempotencyKey(ctx context.Context, digest, token string) error {
	if err := releaseIdempotencyScript.Run(ctx, r.rdb, []string{r.idempotencyKey(digest)}, token).Err(); err != nil {
		return fmt.Errorf("store: release idempotency key: %w", err)
	}
	return nil
}
