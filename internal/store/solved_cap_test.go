package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/store"
)

// TestReadSolvedCapIsTheTakesCap: the solved cap the ops desk reads
// (ReadSolvedCaps, of guard.SolvedCapTake) is the one sends after a
// solved challenge meet: in each state (the floor, the baseline, the cut,
// a carrier's share and its cut) exactly its limit of them leave, the
// refusal names the same limit and cut, and a second read says it is
// full. Reading counts nothing: the read before and the read after the
// same hour's sends differ only by them.
func TestReadSolvedCapIsTheTakesCap(t *testing.T) {
	p := guard.DefaultPolicies().OTP
	p.Challenge.Floor = 10
	p.CountryVelocity.UnverifiedFloor = 0 // sends alone are capped here
	p.Conversion.HistoryMinSends = 20
	h0 := time.Now().Unix()/3600 - 50
	now := time.Unix(h0*3600+60, 0)
	tests := []struct {
		name, carrier string
		seeded        bool
		cut           string // the cut key's name ("" none)
		want          ops.SolvedCap
	}{
		{"no history: the floor", "", false, "", ops.SolvedCap{Limit: 10}},
		{"the baseline", "", true, "", ops.SolvedCap{Limit: 50}},
		{"the country's cap cut", "", true, "solvedcut", ops.SolvedCap{Limit: 5, Cut: true}},
		{"a carrier's share", "mtn", true, "", ops.SolvedCap{Limit: 45}},
		{"a small carrier's share", "glo", true, "", ops.SolvedCap{Limit: 5}},
		{"a carrier's cap cut", "mtn", true, "c:mtn:solvedcut", ops.SolvedCap{Limit: 4, Cut: true}},
		{"no history: a carrier's share is the country's", "mtn", false, "", ops.SolvedCap{Limit: 10}},
	}
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					region := fmt.Sprintf("Q%d", i) // keys of its own
					c := carrierCountry{region: region}
					if tt.seeded {
						seedCarriers(t, s.Velocity, c, h0)
					}
					if tt.cut != "" {
						k := limit.Key{Space: "otp:vel", ID: region, Name: tt.cut}
						if err := s.Velocity.Quarantine(ctx, k, now.Add(time.Hour), time.Hour); err != nil {
							t.Fatal(err)
						}
					}
					read := func() ops.SolvedCap {
						t.Helper()
						caps, err := s.AbuseCounters.ReadSolvedCaps(ctx, []guard.VolumeTake{guard.SolvedCapTake(p, region, guard.DefaultService, tt.carrier, now)})
						if err != nil || len(caps) != 1 {
							t.Fatalf("ReadSolvedCaps: %v, %v", caps, err)
						}
						return caps[0]
					}
					if got := read(); got != tt.want {
						t.Fatalf("read before: got %+v, want %+v", got, tt.want)
					}
					sent, refusal := 0, guard.VolumeResult{}
					for n := range 200 {
						tk := guard.SolvedCapTake(p, region, guard.DefaultService, tt.carrier, now)
						tk.Solved.Used, tk.Solved.TTL = limit.Key{Space: "otp:vel", ID: region, Name: fmt.Sprintf("sol:%d", n)}, time.Minute
						r, err := s.Velocity.TakeVolume(ctx, tk)
						if err != nil {
							t.Fatal(err)
						}
						if !r.Allowed {
							refusal = r
							break
						}
						sent++
					}
					if int64(sent) != tt.want.Limit || refusal.Limit != tt.want.Limit || refusal.Quarantined != tt.want.Cut {
						t.Errorf("takes: %d sent, refused with %+v; want %d sent and the refusal's limit %d, cut %v",
							sent, refusal, tt.want.Limit, tt.want.Limit, tt.want.Cut)
					}
					full := tt.want
					full.Used, full.Full = tt.want.Limit, true
					if got := read(); got != full {
						t.Errorf("read after: got %+v, want %+v", got, full)
					}
				})
			}
		})
	}
}

// TestReadSolvedCapBackedByVerifies: with the unverified budget on, what
// the desk reads the cap holds is the hour's solved sends less those
// their verifies back, as the take counts it: 5 sends fill a cap of 5,
// and 4 verifies (normal 800 permille while unknown) back all 5.
func TestReadSolvedCapBackedByVerifies(t *testing.T) {
	p := guard.DefaultPolicies().OTP
	p.Challenge.Floor = 5
	p.CountryVelocity.UnverifiedFloor = 20
	p.CountryVelocity.CarrierSplit = false
	now := time.Now()
	b := backends(t)["redis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	ctx := context.Background()
	read := func() ops.SolvedCap {
		t.Helper()
		caps, err := s.AbuseCounters.ReadSolvedCaps(ctx, []guard.VolumeTake{guard.SolvedCapTake(p, "UZ", guard.DefaultService, "", now)})
		if err != nil || len(caps) != 1 {
			t.Fatalf("ReadSolvedCaps: %v, %v", caps, err)
		}
		return caps[0]
	}
	tk := guard.SolvedCapTake(p, "UZ", guard.DefaultService, "", now)
	if tk.Unverified.NormalDefault == 0 {
		t.Fatalf("take %+v: want the unverified budget on", tk)
	}
	for n := range 6 {
		tk.Solved.Used, tk.Solved.TTL = limit.Key{Space: "otp:vel", ID: "UZ", Name: fmt.Sprintf("sol:%d", n)}, time.Minute
		if _, err := s.Velocity.TakeVolume(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := read(), (ops.SolvedCap{Limit: 5, Used: 5, Full: true}); got != want {
		t.Fatalf("after 6 solved sends: got %+v, want %+v", got, want)
	}
	for range 4 {
		if err := s.Velocity.CountVerified(ctx, tk.Key, limit.Key{}, tk.Hour, 2*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := read(), (ops.SolvedCap{Limit: 5}); got != want {
		t.Errorf("after 4 verifies: got %+v, want %+v", got, want)
	}
}
