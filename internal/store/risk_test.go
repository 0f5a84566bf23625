package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
)

// TestRiskCache: a cached answer is read back whole, on its own (with a
// trust mark of its hash tag) and by the velocity script with a send's
// count, in every reply the script gives (allowed, refused, NewOff), and
// by the solved cap's script (allowed, refused); a
// send that does not ask gets the script's usual reply; a cleared answer
// is gone, and the cache expires with its TTL.
func TestRiskCache(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			k := limit.Key{Space: "otp:risk", ID: "GB", Name: "r1"}
			none := limit.Key{Space: "otp:risk", ID: "GB", Name: "r2"}
			mark := limit.Key{Space: "otp:tr", ID: "GB", Name: "m1"}
			at := time.Unix(1_700_000_000, 0)
			a := guard.RiskAnswer{Score: 12, Blocked: true, LineType: "nonFixedVoip", At: at}
			if err := s.Risks.CacheRisk(ctx, k, a, time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, err := s.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{{Key: mark}}, time.Hour); err != nil {
				t.Fatal(err)
			}
			want := guard.RiskCached{Read: true, Found: true, Answer: a}
			got, err := s.Risks.CachedRisk(ctx, k, limit.Key{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("CachedRisk (-want +got):\n%s", diff)
			}
			got, err = s.Risks.CachedRisk(ctx, none, mark)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(guard.RiskCached{Read: true, Trusted: true}, got); diff != "" {
				t.Errorf("CachedRisk of none, with its mark (-want +got):\n%s", diff)
			}

			h := time.Now().Unix() / 3600
			vt := func(risk limit.Key, newOff bool) guard.VolumeTake {
				return guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "GB", Name: "h"},
					Quarantine: limit.Key{Space: "otp:vel", ID: "GB", Name: "quarantine"},
					Now:        time.Unix(h*3600+60, 0), Hour: h, Lookback: 24, Floor: 1, QFloor: 1, Factor: 3,
					NewOff: newOff, Risk: risk}
			}
			steps := []struct {
				name    string
				v       guard.VolumeTake
				allowed bool
				risk    guard.RiskCached
			}{
				{"allowed, asked", vt(k, false), true, want},
				{"refused, asked", vt(k, false), false, want},
				{"refused, not cached", vt(none, false), false, guard.RiskCached{Read: true}},
				{"refused, not asked", vt(limit.Key{}, false), false, guard.RiskCached{}},
				{"NewOff, asked", vt(k, true), true, want},
			}
			for _, st := range steps {
				r, err := s.Velocity.TakeVolume(ctx, st.v)
				if err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				if r.Allowed != st.allowed {
					t.Errorf("%s: allowed %t, want %t", st.name, r.Allowed, st.allowed)
				}
				if diff := cmp.Diff(st.risk, r.Risk); diff != "" {
					t.Errorf("%s: risk (-want +got):\n%s", st.name, diff)
				}
			}

			// The solved cap's script answers it the same way (floor 1:
			// the second solved send is refused).
			solved := func(id string) guard.VolumeTake {
				v := vt(k, false)
				v.Key = limit.Key{Space: "otp:vel", ID: "GB", Name: "solved"}
				v.Quarantine = limit.Key{Space: "otp:vel", ID: "GB", Name: "solvedcut"}
				v.Solved = &guard.SolvedUse{Used: limit.Key{Space: "otp:vel", ID: "GB", Name: "used:" + id}, TTL: time.Minute,
					Base: limit.Key{Space: "otp:vel", ID: "GB", Name: "h"}}
				return v
			}
			for i, allowed := range []bool{true, false} {
				r, err := s.Velocity.TakeVolume(ctx, solved(fmt.Sprint(i)))
				if err != nil {
					t.Fatalf("solved %d: %v", i, err)
				}
				if r.Allowed != allowed {
					t.Errorf("solved %d: allowed %t, want %t", i, r.Allowed, allowed)
				}
				if diff := cmp.Diff(want, r.Risk); diff != "" {
					t.Errorf("solved %d: risk (-want +got):\n%s", i, diff)
				}
			}

			if ok, err := s.Risks.ClearRisk(ctx, k); err != nil || !ok {
				t.Fatalf("ClearRisk: %t, %v; want true", ok, err)
			}
			if ok, err := s.Risks.ClearRisk(ctx, k); err != nil || ok {
				t.Fatalf("ClearRisk again: %t, %v; want false", ok, err)
			}
			if got, _ := s.Risks.CachedRisk(ctx, k, limit.Key{}); got.Found {
				t.Errorf("cleared answer still found: %+v", got)
			}
			if err := s.Risks.CacheRisk(ctx, k, a, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if b.mini != nil {
				b.mini.FastForward(time.Second)
			} else {
				time.Sleep(200 * time.Millisecond)
			}
			if got, _ := s.Risks.CachedRisk(ctx, k, limit.Key{}); got.Found {
				t.Errorf("answer found after its TTL: %+v", got)
			}
		})
	}
}
