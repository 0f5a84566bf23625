package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// Deliveries remembers which SMS status reports were recorded, so that a
// replayed callback is recorded once.
type Deliveries struct{ keyspace }

var _ guard.Deliveries = (*Deliveries)(nil)

// ClaimDelivery sets the key of messageID's status report if it is not set
// (SET NX PX): the first caller in ttl, on any instance, gets true, so a
// replayed status callback is recorded once. The message id is the hash
// tag.
func (r *Deliveries) ClaimDelivery(ctx context.Context, messageID, status string, ttl time.Duration) (bool, error) {
	k := limit.Key{Space: "sms", ID: messageID, Name: "status:" + status}
	pipe := r.rdb.TxPipeline()
	cmd := pipe.SetNX(ctx, r.key(k), 1, ttl)
	// SET NX of a key already set replies nil (redis.Nil): not the first.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("store: claim delivery: %w", err)
	}
	return cmd.Val(), nil
}
