package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestTakeSendTrustedSkipsAutomatic: in one MULTI, a send whose number
// carries a trust mark counts none of its automatic windows (allowed, not
// spent: nothing to give back) and its own window still counts; a send to
// an unmarked number counts every window, each with its TTL, the same as
// the MULTI's own hits, and the windows refuse past their limit.
func TestTakeSendTrustedSkipsAutomatic(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			if err := s.LoadScripts(ctx); err != nil {
				t.Fatal(err)
			}
			rt := &redistest.RoundTrips{}
			b.rdb.AddHook(rt)
			marked := limit.Key{Space: "otp:tr", ID: "GB", Name: "m1"}
			if _, err := s.MarkTrusted(ctx, []guard.TrustMark{{Key: marked}}, time.Hour); err != nil {
				t.Fatal(err)
			}
			auto := func(id string, limit int64) limit.Take {
				tk := fw(id, limit, time.Minute, 1)
				tk.Automatic = true
				return tk
			}
			takes := []limit.Take{fw("own", 10, time.Minute, 1), auto("pfx", 1), auto("cc", 5)}
			send := func(mark limit.Key) ([]limit.Result, *guard.VolumeResult) {
				t.Helper()
				vol := sendVolume(time.Now(), 100)
				vol.Mark, vol.TrustedKey, vol.TFloor, vol.TFactor = mark, limit.Key{Space: "otp:vel", ID: "GB", Name: "t"}, 100, 3
				rt.Reset()
				res, vr, err := s.TakeSend(ctx, takes, vol)
				if err != nil {
					t.Fatal(err)
				}
				if rt.N() != 1 {
					t.Errorf("%d round trips, want 1", rt.N())
				}
				return res, vr
			}
			res, vr := send(marked)
			if !vr.Trusted {
				t.Fatal("the marked number's send: the velocity script did not find it trusted")
			}
			if !res[0].Spent || res[0].Count != 1 {
				t.Errorf("marked: own window %+v, want counted once", res[0])
			}
			for i := 1; i < 3; i++ {
				if !res[i].Allowed || res[i].Spent {
					t.Errorf("marked: automatic window %d %+v, want allowed and not spent", i, res[i])
				}
			}
			if n := b.rdb.Exists(ctx, b.prefix+"lim:t:{pfx}:fw", b.prefix+"lim:t:{cc}:fw").Val(); n != 0 {
				t.Errorf("marked: %d automatic windows written, want 0", n)
			}
			unmarked := limit.Key{Space: "otp:tr", ID: "GB", Name: "m2"}
			for i, want := range []bool{true, false} {
				res, vr = send(unmarked)
				if vr.Trusted {
					t.Fatal("the unmarked number's send reads trusted")
				}
				if res[1].Allowed != want || !res[1].Spent || res[1].Count != int64(i+1) || res[2].Count != int64(i+1) || !res[2].Allowed {
					t.Errorf("unmarked send %d: windows %+v %+v, want counts %d, the first allowed %v", i+1, res[1], res[2], i+1, want)
				}
				if res[1].ResetAfter <= 0 || res[1].ResetAfter > time.Minute {
					t.Errorf("unmarked send %d: reset after %v, want within the window", i+1, res[1].ResetAfter)
				}
			}
			if ttl := b.rdb.PTTL(ctx, b.prefix+"lim:t:{pfx}:fw").Val(); ttl <= 0 || ttl > time.Minute {
				t.Errorf("automatic window TTL %v, want within the minute", ttl)
			}
		})
	}
}
