package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
)

// TestTrustedTier drives the velocity script's two tiers: a send the
// caller knows trusted, or whose mark is set, counts in the trusted tier
// against its own floor; an unmarked one in the new tier; with NewOff an
// unmarked send counts nothing; a verify of a marked number, or of a
// trusted send's code, credits the trusted tier, and an import's mark
// expires on time.
func TestTrustedTier(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			h := time.Now().Unix() / 3600
			mark := limit.Key{Space: "otp:tr", ID: "GB", Name: "m1"}
			other := limit.Key{Space: "otp:tr", ID: "GB", Name: "m2"}
			account := limit.Key{Space: "otp:tr", ID: "GB", Name: "m4"}
			tier := limit.Key{Space: "otp:vel", ID: "GB", Name: "t"}
			vt := func(trusted bool, m limit.Key, newOff bool) guard.VolumeTake {
				return guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "GB", Name: "h"},
					Quarantine: limit.Key{Space: "otp:vel", ID: "GB", Name: "quarantine"},
					Now:        time.Unix(h*3600+60, 0), Hour: h, Lookback: 24, Floor: 2, QFloor: 1, Factor: 3,
					Trusted: trusted, Mark: m, TrustedKey: tier, TFloor: 3, TFactor: 2, NewOff: newOff}
			}
			take := func(v guard.VolumeTake) guard.VolumeResult {
				t.Helper()
				r, err := s.Velocity.TakeVolume(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			if _, err := s.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{{Key: mark}}, time.Hour); err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				name             string
				v                guard.VolumeTake
				allowed, trusted bool
				count            int64
			}{
				{"known trusted", vt(true, limit.Key{}, false), true, true, 1},
				{"marked", vt(false, mark, false), true, true, 2},
				{"unmarked: new tier", vt(false, other, false), true, false, 1},
				{"new tier", vt(false, other, false), true, false, 2},
				{"new tier full", vt(false, other, false), false, false, 2},
				{"marked, still room", vt(false, mark, false), true, true, 3},
				{"trusted tier full", vt(true, limit.Key{}, false), false, true, 3},
				{"unmarked with the rule off: nothing counted", vt(false, other, true), true, false, 0},
			}
			for _, st := range steps {
				r := take(st.v)
				if r.Allowed != st.allowed || r.Trusted != st.trusted || r.Count != st.count {
					t.Errorf("%s: allowed %v trusted %v count %d, want %v %v %d", st.name, r.Allowed, r.Trusted, r.Count, st.allowed, st.trusted, st.count)
				}
			}
			// A marked number's verify credits the trusted tier, and so
			// does an unmarked one's whose code was sent in the trusted
			// tier (an account's); an unmarked new send's does not (it
			// only sets the mark).
			for _, v := range []struct {
				name        string
				k           limit.Key
				sentTrusted bool
				want        int
			}{{"marked", mark, false, 1}, {"unmarked, new send", other, false, 0}, {"unmarked, trusted send", account, true, 1}} {
				got, err := s.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{{Key: v.k, Tier: tier, Hour: h - 1, Credit: true,
					SentTrusted: v.sentTrusted, TTL: 26 * time.Hour, Now: time.Now()}}, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if got.Trusted != v.want || got.Held != 0 {
					t.Errorf("%s verify: %d credited, want %d", v.name, got, v.want)
				}
			}
			if v, _ := b.rdb.HGet(ctx, b.prefix+"otp:vel:{GB}:t", "v:"+itoa(h-1)).Int64(); v != 2 {
				t.Errorf("trusted tier credit: %d verifies, want 2", v)
			}
			for _, k := range []limit.Key{mark, other, account} {
				if ok, err := s.TrustMarks.Trusted(ctx, k, time.Now()); err != nil || !ok {
					t.Errorf("Trusted(%s) = %v, %v, want true", k.Name, ok, err)
				}
				ttl := b.rdb.PTTL(ctx, b.prefix+"otp:tr:{GB}:"+k.Name).Val()
				if ttl <= 59*time.Minute || ttl > time.Hour {
					t.Errorf("mark %s: TTL %s, want about 1h", k.Name, ttl)
				}
			}
			if ok, _ := s.TrustMarks.Trusted(ctx, limit.Key{Space: "otp:tr", ID: "GB", Name: "m3"}, time.Now()); ok {
				t.Error("an unset mark reads trusted")
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
