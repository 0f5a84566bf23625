package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestSyncModeIdleKeyIsOnlyRead: a hot key with nothing to send is read,
// never written: no window starts, no bucket is rewritten. WATCH proves it:
// a transaction on the keys fails if anything wrote them in between.
func TestSyncModeIdleKeyIsOnlyRead(t *testing.T) {
	ctx := context.Background()
	tg := redistest.New(t)
	rdb := redistest.Client(t, tg.URL)
	st := store.NewRedis(rdb, tg.Prefix)
	fw := limit.Take{Key: limit.Key{Space: "lim:idle", ID: "w", Name: "fw"}, Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute}
	tb := limit.Take{Key: limit.Key{Space: "lim:idle", ID: "b", Name: "tb"}, Algorithm: limit.TokenBucket, Limit: 10, Rate: 0.01}
	keys := []string{tg.Prefix + "lim:idle:{w}:fw", tg.Prefix + "lim:idle:{b}:tb"}
	sync := func(dw, db int64) []limit.SyncState {
		t.Helper()
		states, err := st.Sync(ctx, []limit.SyncItem{{Take: fw, Delta: dw}, {Take: tb, Delta: db}})
		if err != nil {
			t.Fatal(err)
		}
		return states
	}
	// wrote runs a sync of dw, db between WATCH and EXEC on the keys, and
	// reports whether it wrote them.
	wrote := func(dw, db int64) (states []limit.SyncState, wrote bool) {
		t.Helper()
		err := rdb.Watch(ctx, func(tx *redis.Tx) error {
			states = sync(dw, db)
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() })
			return err
		}, keys...)
		if err != nil && !errors.Is(err, redis.TxFailedErr) {
			t.Fatal(err)
		}
		return states, errors.Is(err, redis.TxFailedErr)
	}

	got := sync(0, 0)
	if n := rdb.Exists(ctx, keys...).Val(); n != 0 {
		t.Fatalf("an idle sync created %d keys, want none", n)
	}
	if got[0].Remaining != 10 || got[0].ResetAfter != time.Minute || got[1].Remaining != 10 {
		t.Errorf("idle sync of missing keys: %+v, want all left and a whole window", got)
	}

	sync(3, 4)
	ttl := rdb.PTTL(ctx, keys[0]).Val()
	if _, w := wrote(1, 1); !w {
		t.Fatal("WATCH saw no write by a sync with deltas: the check proves nothing")
	}
	got, w := wrote(0, 0)
	if w {
		t.Error("a sync with nothing to send wrote the keys")
	}
	if got[0].Remaining != 6 || got[1].Remaining != 5 {
		t.Errorf("idle sync: remaining %d and %d, want 6 (10 - 4 counted) and 5 (10 - 5 spent)", got[0].Remaining, got[1].Remaining)
	}
	if got[0].ResetAfter <= 0 || got[0].ResetAfter > ttl {
		t.Errorf("idle sync: window resets after %s, want what is left of it (at most %s)", got[0].ResetAfter, ttl)
	}
}
