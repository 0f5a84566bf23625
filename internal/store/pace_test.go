package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
)

// paceVolume is an untrusted send's volume take for country KE at now:
// the velocity rule as the default policy makes it (floor, factor 3, the
// unverified budget on, so that the hour's verified sends grow its limit),
// with the bounded pace growth (0: off).
func paceVolume(now time.Time, floor int64, growth float64) guard.VolumeTake {
	return guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "KE", Name: "h"},
		Quarantine: limit.Key{Space: "otp:vel", ID: "KE", Name: "quarantine"},
		Now:        now, Hour: now.Unix() / 3600, Lookback: 7 * 24, Floor: floor, QFloor: max(1, floor/10), Factor: 3,
		HistoryMinSends: 200, TrustedKey: limit.Key{Space: "otp:vel", ID: "KE", Name: "t"}, TFloor: 100, TFactor: 3,
		Unverified:   guard.UnverifiedTake{Floor: 20, Share: 0.1, NormalDefault: 800, NormalMin: 200},
		GrowthPerDay: growth}
}

// ring runs a ring that owns its numbers against one country: perMinute
// new numbers a minute for hours from start, every code that leaves
// verified at once (as fast as it can grow the hour's limit). It answers
// the SMS out per hour and the largest baseline and limit each hour saw.
type ringHour struct{ sent, baseline, limit int64 }

func runRing(t *testing.T, s *store.Redis, start time.Time, hours, perMinute int, floor int64, growth float64) []ringHour {
	t.Helper()
	ctx := context.Background()
	out := make([]ringHour, hours)
	for h := range hours {
		for m := range 60 {
			now := start.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
			for range perMinute {
				v := paceVolume(now, floor, growth)
				r, err := s.Velocity.TakeVolume(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				out[h].baseline = max(out[h].baseline, r.Baseline)
				out[h].limit = max(out[h].limit, r.Limit)
				if !r.Allowed {
					continue
				}
				out[h].sent++
				if err := s.Velocity.CountVerified(ctx, v.Key, limit.Key{}, v.Hour, 9*24*time.Hour); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return out
}

// paceCeiling is the most an hour of a country may send under the pace,
// by its baseline or by its own verifies: max(floor, factor x ceiling),
// where the ceiling is growth x the largest baseline of the three days
// before, at least the floor.
func paceCeiling(floor int64, factor, growth float64, before ...int64) int64 {
	b := floor
	for _, x := range before {
		b = max(b, x)
	}
	ceiling := int64(growth*float64(b) + 1e-9)
	return max(floor, int64(factor*float64(ceiling)+1e-9))
}

// TestPaceRingSixHours: a ring verifying every code of 40 new numbers a
// minute for 6 hours in a country without history gets at most 6 hours of
// the first day's ceiling, max(floor, factor x growth x floor) an hour,
// where without the pace the hour's own verifies grow the limit without
// bound (it gets nearly every try).
func TestPaceRingSixHours(t *testing.T) {
	// Thousands of script calls: on a real Redis only (miniredis's Lua
	// takes a minute for them).
	for name, mk := range map[string]func(*testing.T) backend{"redis": backends(t)["redis"]} {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			start := time.Unix(time.Now().Unix()/86400*86400+9*3600, 0) // 09:00 of today
			const floor, growth = 50, 2.0
			bound := 6 * paceCeiling(floor, 3, growth)
			var got int64
			for h, r := range runRing(t, s, start, 6, 40, floor, growth) {
				if r.sent > paceCeiling(floor, 3, growth) {
					t.Errorf("hour %d: %d SMS, want at most the day's ceiling %d", h, r.sent, paceCeiling(floor, 3, growth))
				}
				got += r.sent
			}
			if got > bound {
				t.Errorf("the ring got %d SMS in 6 h, want at most %d", got, bound)
			}
			// The same ring without the pace (another prefix: a country of
			// its own) takes far more: the bound above is the pace's.
			s2 := store.NewRedis(b.rdb, b.prefix+"nopace:")
			var unpaced int64
			for _, r := range runRing(t, s2, start, 6, 40, floor, 0) {
				unpaced += r.sent
			}
			if unpaced <= 2*bound {
				t.Errorf("without the pace the ring got %d SMS, want far more than the paced bound %d", unpaced, bound)
			}
			t.Logf("ring 40/min for 6 h: %d SMS of %d tried with the pace (bound %d), %d without", got, 6*60*40, bound, unpaced)
		})
	}
}

// TestPaceBaselineAtMostDoublesADay drives a ring that verifies every
// code over five days of a driven clock: no day's largest baseline goes
// past growth x the day before's (at least the floor), no hour past the
// day's ceiling, and the room does grow, a day at a time.
func TestPaceBaselineAtMostDoublesADay(t *testing.T) {
	// Thousands of script calls: on a real Redis only (miniredis's Lua
	// takes a minute for them).
	for name, mk := range map[string]func(*testing.T) backend{"redis": backends(t)["redis"]} {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			day0 := time.Now().Unix()/86400 - 10
			start := time.Unix(day0*86400, 0)
			const floor, growth, days = 5, 2.0, 5
			hours := runRing(t, s, start, days*24, 4, floor, growth)
			dayMax := make([]int64, days) // each day's largest baseline
			for d := range days {
				var before []int64
				for k := max(0, d-3); k < d; k++ {
					before = append(before, dayMax[k])
				}
				ceiling := paceCeiling(floor, 3, growth, before...)
				prev := int64(floor)
				if d > 0 {
					prev = max(prev, dayMax[d-1])
				}
				for h := d * 24; h < (d+1)*24; h++ {
					r := hours[h]
					dayMax[d] = max(dayMax[d], r.baseline)
					if r.sent > ceiling || r.limit > ceiling {
						t.Errorf("day %d hour %d: %d SMS under a limit of %d, want at most the day's ceiling %d", d, h%24, r.sent, r.limit, ceiling)
					}
				}
				if float64(dayMax[d]) > growth*float64(prev)+1e-9 {
					t.Errorf("day %d: baseline %d, more than %v x the day before's %d", d, dayMax[d], growth, prev)
				}
			}
			if last, first := hours[days*24-1].sent, hours[24].sent; last < 4*first {
				t.Errorf("the ring's hours: %d on day 1, %d on day %d, want the room to grow a day at a time", first, last, days-1)
			}
			t.Logf("each day's largest baseline %v; last hour of each day: %d %d %d %d %d SMS", dayMax,
				hours[23].sent, hours[47].sent, hours[71].sent, hours[95].sent, hours[119].sent)
		})
	}
}

// TestPaceWithinHourBoundedForTrustedTier: the pace is a function of the
// hash's own counts, so the trusted tier's hash is held the same way: its
// hour's own verifies grow its limit up to max(TFloor, TFactor x growth x
// TFloor) in a country without history, no further.
func TestPaceWithinHourBoundedForTrustedTier(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			now := time.Unix(time.Now().Unix()/3600*3600, 0)
			var sent int64
			for range 1000 {
				v := paceVolume(now, 50, 2)
				v.Trusted = true
				r, err := s.Velocity.TakeVolume(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				if !r.Allowed {
					break
				}
				sent++
				if err := s.Velocity.CountVerified(ctx, v.TrustedKey, limit.Key{}, v.Hour, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if want := paceCeiling(100, 3, 2); sent != want {
				t.Errorf("trusted tier, every code verified: %d sends in the hour, want the ceiling %d", sent, want)
			}
		})
	}
}

// TestPaceKeepsAHistoryItFinds: a country whose history was earned before
// the pace (or before its records expired) is not cut below it: its first
// hour under the pace records that history as the day before's, so its
// limit stays factor x its baseline, that hour and the next.
func TestPaceKeepsAHistoryItFinds(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			start := time.Unix(time.Now().Unix()/86400*86400+9*3600, 0)
			const floor, verified = 5, 200
			for range verified { // an hour of 200 verified sends, without the pace
				v := paceVolume(start, floor, 0)
				if r, err := s.Velocity.TakeVolume(ctx, v); err != nil || !r.Allowed {
					t.Fatalf("history send: %+v, %v", r, err)
				}
				if err := s.Velocity.CountVerified(ctx, v.Key, limit.Key{}, v.Hour, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			for h := 1; h <= 2; h++ {
				r, err := s.Velocity.TakeVolume(ctx, paceVolume(start.Add(time.Duration(h)*time.Hour), floor, 2))
				if err != nil {
					t.Fatal(err)
				}
				if r.Baseline != verified || r.Limit != 3*verified {
					t.Errorf("hour %d under the pace: baseline %d, limit %d; want %d and %d (its history kept)", h, r.Baseline, r.Limit, verified, 3*verified)
				}
			}
		})
	}
}
