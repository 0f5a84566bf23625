package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
)

// Ops sessions are signed tokens that every instance checks alone; signing
// out must reach every instance too, so the sessions signed out before
// they expire are kept here, each until it would have expired.

// Sessions keeps the ops sessions signed out before they expire.
type Sessions struct{ keyspace }

func (r *Sessions) sessionKey(id string) string {
	return r.key(limit.Key{Space: "ops:session", ID: id, Name: "revoked"})
}

// RevokeSession marks the session id signed out until until (its expiry).
func (r *Sessions) RevokeSession(ctx context.Context, id string, until time.Time) error {
	pipe := r.rdb.TxPipeline()
	pipe.SetArgs(ctx, r.sessionKey(id), 1, redis.SetArgs{ExpireAt: until})
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: revoke session: %w", err)
	}
	return nil
}

// SessionRevoked reports whether the session id was signed out.
func (r *Sessions) SessionRevoked(ctx context.Context, id string) (bool, error) {
	pipe := r.rdb.TxPipeline()
	n := pipe.Exists(ctx, r.sessionKey(id))
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("store: session revoked: %w", err)
	}
	return n.Val() == 1, nil
}
