package guarded

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The idempotency keys reach Redis through the Fallback's breaker and
// timeout: while Redis is away a key cannot be claimed and the request
// runs as one without a key (httpapi/idempotency.go). On Redis Cluster
// through the breaker of the master that holds the record (DoFor), so one
// master's death costs only the records in its slots.

// idemKey is the record's key (store/idempotency.go), for its node.
func idemKey(digest string) limit.Key { return limit.Key{Space: "idem", ID: digest, Name: "r"} }

func (g Store) ClaimIdempotencyKey(ctx context.Context, digest, body, token string, pending time.Duration) (string, []byte, error) {
	var state string
	var answer []byte
	err := g.fb.DoFor(ctx, idemKey(digest), func(ctx context.Context) (err error) {
		state, answer, err = g.st.ClaimIdempotencyKey(ctx, digest, body, token, pending)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return state, answer, nil
}

func (g Store) FinishIdempotencyKey(ctx context.Context, digest, token string, answer []byte, ttl time.Duration) (bool, error) {
	var ok bool
	err := g.fb.DoFor(ctx, idemKey(digest), func(ctx context.Context) (err error) {
		ok, err = g.st.FinishIdempotencyKey(ctx, digest, token, answer, ttl)
		return err
	})
	return err == nil && ok, err
}

func (g Store) ReleaseIdempotencyKey(ctx context.Context, digest, token string) error {
	return g.fb.DoFor(ctx, idemKey(digest), func(ctx context.Context) error { return g.st.ReleaseIdempotencyKey(ctx, digest, token) })
}

// TakeKept4xx counts a kept 4xx answer of caller in an hour's fixed
// window (the stores' own fixed-window script, one key per caller).
func (g Store) TakeKept4xx(ctx context.Context, caller string, lim int64) (bool, error) {
	var res []limit.Result
	err := g.fb.Do(ctx, func(ctx context.Context) (err error) {
		res, err = g.st.Take(ctx, []limit.Take{{Key: limit.Key{Space: "idem4xx", ID: caller, Name: "n"},
			Algorithm: limit.FixedWindow, Limit: lim, Window: time.Hour, Cost: 1, SpendIfAllowed: true}})
		return err
	})
	if err != nil || len(res) != 1 {
		return false, err
	}
	return res[0].Allowed, nil
}

// ClaimsInSend: on a single Redis (or Sentinel's master) a send's
// Idempotency-Key claim rides in the MULTI that takes its limits
// (guard.SendClaim); on Cluster the record's slot is not the limits', so
// the claim keeps its own round trip first.
func (g Store) ClaimsInSend() bool { return !g.st.Cluster() }
