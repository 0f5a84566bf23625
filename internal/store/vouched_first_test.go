package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
)

// TestSolvedTakeTriesTheVouchedPlaceFirst: a solved take past the cut
// that carries the vouched tier's place (SolvedUse.Vouched) counts in
// the tier while its cap has room, then in the solved cap without its
// cut, then is refused, each send in one place only; at once from many
// goroutines, exactly the two caps' worth leave. The tier's count is the
// velocity script's: its own take then finds the cap spent. A solution
// already used is refused in either place.
func TestSolvedTakeTriesTheVouchedPlaceFirst(t *testing.T) {
	p := guard.DefaultPolicies().OTP
	p.Challenge.Floor = 4 // the cut: 1
	p.CountryVelocity.UnverifiedFloor = 0
	const vouchedCap, uncutCap, senders = 3, 4, 16
	now := time.Now().Truncate(time.Hour).Add(10 * time.Minute)
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for _, concurrent := range []bool{false, true} {
				t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
					b := mk(t)
					s := store.NewRedis(b.rdb, b.prefix)
					ctx := context.Background()
					region := "VF"
					if err := s.Velocity.Quarantine(ctx, limit.Key{Space: "otp:vel", ID: region, Name: "solvedcut"}, now.Add(time.Hour), time.Hour); err != nil {
						t.Fatal(err)
					}
					place := guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: region, Name: "vouched"},
						Quarantine: limit.Key{Space: "otp:vel", ID: region, Name: "vouchedcut"}, Now: now, Hour: now.Unix() / 3600,
						Floor: vouchedCap, QFloor: vouchedCap, Vouched: true}
					take := func(n int, risk bool) (guard.VolumeResult, error) {
						tk := guard.SolvedCapTake(p, region, guard.DefaultService, "", now)
						tk.Solved.Used, tk.Solved.TTL = limit.Key{Space: "otp:vel", ID: region, Name: fmt.Sprintf("sol:%d", n)}, time.Minute
						tk.Solved.Uncut, tk.Solved.Vouched = true, &place
						if risk {
							tk.Risk = limit.Key{Space: "otp:vel", ID: region, Name: "risk"}
						}
						return s.Velocity.TakeVolume(ctx, tk)
					}
					results := make([]guard.VolumeResult, senders)
					errs := make([]error, senders)
					var wg sync.WaitGroup
					for n := range senders {
						if !concurrent {
							results[n], errs[n] = take(n, n%2 == 1)
							continue
						}
						wg.Go(func() { results[n], errs[n] = take(n, n%2 == 1) })
					}
					wg.Wait()
					var inVouched, inUncut int
					for n, r := range results {
						if errs[n] != nil {
							t.Fatalf("take %d: %v", n, errs[n])
						}
						switch {
						case r.Allowed && r.Vouched:
							inVouched++
						case r.Allowed:
							inUncut++
						case r.Vouched:
							t.Errorf("take %d: refused, and said counted in the vouched tier", n)
						}
						if !concurrent {
							want := n < vouchedCap+uncutCap
							if r.Allowed != want || r.Vouched != (n < vouchedCap) {
								t.Errorf("take %d: allowed %v vouched %v, want %v %v", n, r.Allowed, r.Vouched, want, n < vouchedCap)
							}
						}
					}
					if inVouched != vouchedCap || inUncut != uncutCap {
						t.Errorf("counted in the vouched tier %d, in the uncut cap %d; want %d, %d", inVouched, inUncut, vouchedCap, uncutCap)
					}
					caps, err := s.AbuseCounters.ReadSolvedCaps(ctx, []guard.VolumeTake{guard.SolvedCapTake(p, region, guard.DefaultService, "", now)})
					if err != nil {
						t.Fatal(err)
					}
					if got, want := caps[0].Used, int64(uncutCap); got != want {
						t.Errorf("the solved cap's count: got %d, want %d (the vouched sends not in it)", got, want)
					}
					// The tier's own take (the velocity script) reads the same count.
					r, err := s.Velocity.TakeVolume(ctx, place)
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed || r.Count != vouchedCap || r.Limit != vouchedCap {
						t.Errorf("the vouched tier's own take after: allowed %v, %d of %d; want refused, %d of %d", r.Allowed, r.Count, r.Limit, vouchedCap, vouchedCap)
					}
					// Every solution was taken by the step that counted it.
					for n, first := range results {
						if !first.Allowed {
							continue
						}
						if r, err := take(n, false); err != nil || r.Allowed || !r.Reused || r.Vouched {
							t.Errorf("solution %d again: %+v, %v; want reused", n, r, err)
						}
					}
				})
			}
		})
	}
}
