package guarded

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestAdvisoryCallsHonourTheBreaker: with the breaker open, the conversion
// watch (its batched counts too, made after the answer) and the block
// index reach no Redis at all: each call fails at once
// with ErrStoreUnavailable and no command leaves the client.
func TestAdvisoryCallsHonourTheBreaker(t *testing.T) {
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: "redis://127.0.0.1:1", Timeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	sent := &redistest.RoundTrips{}
	rdb.AddHook(sent)
	st := store.NewRedis(rdb, "og:")
	fb := resilience.NewFallback(resilience.FallbackOptions{Counter: st.Counters, Codes: st.Codes, Timeout: 10 * time.Millisecond,
		Breaker: resilience.BreakerOptions{Failures: 1, OpenFor: time.Hour}})
	fb.ObserveProbe(context.Background(), errors.New("dial tcp 127.0.0.1:1: connection refused"))
	g := New(fb, st)
	ctx := context.Background()
	subject := []limit.Key{{Space: "conv", ID: "+4474", Name: "p"}}

	calls := map[string]error{}
	_, calls["CountConversion"] = g.CountConversion(ctx, guard.ConversionSend, time.Now(), time.Hour, 2*time.Minute, subject)
	_, calls["CountConversions"] = g.CountConversions(ctx, time.Hour, 2*time.Minute,
		[]guard.ConversionCount{{Kind: guard.ConversionSend, Now: time.Now(), Subjects: subject}})
	_, calls["ClaimAlert"] = g.ClaimAlert(ctx, subject[0], time.Hour)
	calls["ReleaseAlert"] = g.ReleaseAlert(ctx, subject[0])
	calls["NoteBlock"] = g.NoteBlock(ctx, guard.Block{Phone: "+447400123456", Reason: problem.CodeCooldown, Until: time.Now().Add(time.Minute)})
	calls["NoteBlockRefundVolume"] = g.NoteBlockRefundVolume(ctx, guard.Block{Phone: "+447400123456", Reason: problem.CodeCooldown, Until: time.Now().Add(time.Minute)},
		limit.Key{Space: "otp:vel", ID: "GB", Name: "h"}, limit.Key{}, time.Now())
	calls["EndBlock"] = g.EndBlock(ctx, "+447400123456", problem.CodeCooldown)
	_, _, calls["ListBlocks"] = g.ListBlocks(ctx, nil, 10)
	calls["Unblock"] = g.Unblock(ctx, "+447400123456", nil)
	for name, err := range calls {
		if !errors.Is(err, limit.ErrStoreUnavailable) {
			t.Errorf("%s with the breaker open: %v, want ErrStoreUnavailable", name, err)
		}
	}
	if n := sent.N(); n != 0 {
		t.Errorf("%d Redis round trips with the breaker open, want 0", n)
	}
}
