package store

import "context"

// The single-check scripts, for tests that call them the way the store
// did before (inside a MULTI) to compare what Redis spends.
var (
	TokenBucketScriptForTest = tokenBucketScript
	WindowTakeScriptForTest  = windowTakeScript
)

// Interval is interval, for tests that build script arguments.
var Interval = interval

// DeleteCodeKeyForTest deletes the number's code and nothing else, as its
// TTL running out does.
func (r *Redis) DeleteCodeKeyForTest(ctx context.Context, phone string) error {
	return r.rdb.Del(ctx, r.codeKey(phone)).Err()
}
