package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// carrierCountry is one country's velocity counts and its carriers' keys
// in the carrier tests: floor 50, factor 3, a day's lookback, history
// known from 20 sends.
type carrierCountry struct {
	region string
}

func (c carrierCountry) key() limit.Key { return limit.Key{Space: "otp:vel", ID: c.region, Name: "h"} }

func (c carrierCountry) carrier(name string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: c.region, Name: "c:" + name}
}

func (c carrierCountry) since() limit.Key {
	return limit.Key{Space: "otp:vel", ID: c.region, Name: "carriers"}
}

// take is the velocity take of one send to carrier (none: "") in hour h,
// with the unverified budget's floor (0: off).
func (c carrierCountry) take(h int64, carrier string, unverifiedFloor int64) guard.VolumeTake {
	t := guard.VolumeTake{Key: c.key(), Quarantine: limit.Key{Space: "otp:vel", ID: c.region, Name: "quarantine"},
		Now: time.Unix(h*3600+60, 0), Hour: h, Lookback: 24, Floor: 50, QFloor: 5, Factor: 3, HistoryMinSends: 20}
	if carrier != "" {
		t.Carrier = guard.CarrierTake{Name: carrier, Key: c.carrier(carrier), Since: c.since(), FloorShare: 0.1}
	}
	if unverifiedFloor > 0 {
		t.Unverified = guard.UnverifiedTake{Floor: unverifiedFloor, Share: 0.1, NormalDefault: 800, NormalMin: 200}
	}
	return t
}

// fillCarrier takes sends to carrier in hour h until one is refused (or
// most sends leave) and returns how many left and the refusal.
func fillCarrier(t *testing.T, v *store.Velocity, c carrierCountry, h int64, carrier string, unverifiedFloor int64, most int) (int, guard.VolumeResult) {
	t.Helper()
	for n := 0; n < most; n++ {
		r, err := v.TakeVolume(context.Background(), c.take(h, carrier, unverifiedFloor))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			return n, r
		}
	}
	return most, guard.VolumeResult{Allowed: true}
}

// seedCarriers gives c two hours of verified history: each hour 45 sends
// to "mtn" and 5 to "glo", every one verified. Over the lookback the
// country's credit is 100, mtn's 90 (share 900 permille), glo's 10 (100);
// the baseline is 50, the country's limit 150.
func seedCarriers(t *testing.T, v *store.Velocity, c carrierCountry, h0 int64) {
	t.Helper()
	for h := h0 - 2; h < h0; h++ {
		for carrier, n := range map[string]int{"mtn": 45, "glo": 5} {
			if got, r := fillCarrier(t, v, c, h, carrier, 0, n); got != n {
				t.Fatalf("seeding hour %d: %d sends to %s left, want %d (%+v)", h-h0, got, carrier, n, r)
			}
			for range n {
				if err := v.CountVerified(context.Background(), c.key(), c.carrier(carrier), h, 26*time.Hour); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestCarrierSplit: with a verified history, each carrier gets its share
// of the country's hour, at least its floor (a tenth of the country's);
// the carriers together never pass the country's limit, whose refusal is
// the country's; a refund gives back both counts. Without history the
// share is 1: one carrier may take the whole floor, as before.
func TestCarrierSplit(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			c := carrierCountry{region: "NG"}
			h0 := time.Now().Unix()/3600 - 50
			seedCarriers(t, s.Velocity, c, h0)

			// glo: 10 % of 150 = 15, refused by its share.
			got, r := fillCarrier(t, s.Velocity, c, h0, "glo", 0, 1000)
			if got != 15 || !r.Carrier || r.Count != 15 || r.Limit != 15 || r.Baseline != 50 {
				t.Fatalf("glo: %d sent, refusal %+v; want 15, the carrier's at count 15, limit 15", got, r)
			}
			// A refund gives back the carrier's send and the country's.
			if err := s.Velocity.RefundVolume(ctx, c.key(), c.carrier("glo"), time.Unix(h0*3600+60, 0)); err != nil {
				t.Fatal(err)
			}
			r, err := s.Velocity.TakeVolume(ctx, c.take(h0, "glo", 0))
			if err != nil || !r.Allowed || r.Count != 15 {
				t.Fatalf("glo after a refund: %+v, %v; want allowed, the country's 15th", r, err)
			}
			// airtel has no history: its floor, 5.
			if got, r := fillCarrier(t, s.Velocity, c, h0, "airtel", 0, 1000); got != 5 || !r.Carrier || r.Limit != 5 {
				t.Fatalf("airtel: %d sent, refusal %+v; want the carrier floor 5", got, r)
			}
			// mtn: 90 % of 150 = 135, but 20 are gone: the country refuses at 150.
			got, r = fillCarrier(t, s.Velocity, c, h0, "mtn", 0, 1000)
			if got != 130 || r.Carrier || r.Count != 150 || r.Limit != 150 {
				t.Fatalf("mtn: %d sent, refusal %+v; want 130, the country's at 150", got, r)
			}

			// Thin history: no split, one carrier takes the country's floor.
			thin := carrierCountry{region: "GH"}
			if got, r := fillCarrier(t, s.Velocity, thin, h0, "mtn", 0, 1000); got != 50 || r.Carrier || r.Limit != 50 {
				t.Fatalf("thin history: %d sent, refusal %+v; want the country's floor 50", got, r)
			}
			if got, r := fillCarrier(t, s.Velocity, thin, h0, "vodafone", 0, 1000); got != 0 || r.Carrier {
				t.Fatalf("thin history, a second carrier: %d sent, refusal %+v; want the country's refusal", got, r)
			}

			// History from before the carriers were counted is no carrier's:
			// no split until the hours since hold enough, then the shares.
			before := carrierCountry{region: "CM"}
			for h := h0 - 2; h < h0; h++ {
				if got, _ := fillCarrier(t, s.Velocity, before, h, "", 0, 50); got != 50 {
					t.Fatalf("CM's history, hour %d: %d sent, want 50", h-h0, got)
				}
				for range 50 {
					if err := s.Velocity.CountVerified(ctx, before.key(), limit.Key{}, h, 26*time.Hour); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got, r := fillCarrier(t, s.Velocity, before, h0, "mtn", 0, 1000); got != 150 || r.Carrier {
				t.Fatalf("CM's first hour with carriers: %d sent to mtn, refusal %+v; want the country's 150", got, r)
			}
			for range 150 {
				if err := s.Velocity.CountVerified(ctx, before.key(), before.carrier("mtn"), h0, 26*time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			// An hour later the hour since holds 150 verified sends, all mtn's:
			// orange, without any, gets its floor of the country's 450.
			if got, r := fillCarrier(t, s.Velocity, before, h0+1, "orange", 0, 1000); got != 5 || !r.Carrier || r.Limit != 5 {
				t.Fatalf("CM's second hour: %d sent to orange, refusal %+v; want its floor 5", got, r)
			}
		})
	}
}

// TestCarrierUnverifiedBudget: a carrier's sends its own verifies do not
// back may be at most its share of the country's unverified budget (its
// floor a tenth of the country's); a verify credited to the carrier backs
// one more of its sends, and a carrier the budget refuses leaves the
// other carriers theirs.
func TestCarrierUnverifiedBudget(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			c := carrierCountry{region: "KE"}
			h0 := time.Now().Unix()/3600 - 50
			seedCarriers(t, s.Velocity, c, h0)
			// The country's budget: max(20, 0.1 x 50) = 20; glo's max(2, 10 % of 20) = 2.
			got, r := fillCarrier(t, s.Velocity, c, h0, "glo", 20, 1000)
			if got != 2 || !r.Carrier || r.Unverified != 2 {
				t.Fatalf("glo: %d sent, refusal %+v; want 2, the carrier's budget 2", got, r)
			}
			// The normal is 100 %: one verify backs one send.
			if err := s.Velocity.CountVerified(ctx, c.key(), c.carrier("glo"), h0, 26*time.Hour); err != nil {
				t.Fatal(err)
			}
			if got, _ := fillCarrier(t, s.Velocity, c, h0, "glo", 20, 1000); got != 1 {
				t.Fatalf("glo after a verify: %d sent, want 1", got)
			}
			// mtn keeps its own: 90 % of 20 = 18, which is also what glo's 3
			// sends (one backed) left of the country's 20: the country's check
			// comes first and refuses the 19th.
			got, r = fillCarrier(t, s.Velocity, c, h0, "mtn", 20, 1000)
			if got != 18 || r.Carrier || r.Unverified != 20 {
				t.Fatalf("mtn: %d sent, refusal %+v; want 18, then the country's budget 20", got, r)
			}
		})
	}
}

// TestCarrierDoesNotGrowWithItsVerifies: a ring that owns one carrier's
// numbers and verifies every code keeps that carrier's share of the
// country's room: its own verifies do not grow the carrier past it (the
// country's limit, of which it keeps its share, is not yet grown by them).
func TestCarrierDoesNotGrowWithItsVerifies(t *testing.T) {
	b := backends(t)["miniredis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	ctx := context.Background()
	c := carrierCountry{region: "RW"}
	h0 := time.Now().Unix()/3600 - 50
	seedCarriers(t, s.Velocity, c, h0)
	sent := 0
	for range 30 { // glo's share is 15
		r, err := s.Velocity.TakeVolume(ctx, c.take(h0, "glo", 20))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			if !r.Carrier {
				t.Fatalf("glo's send %d refused by the country, want by the carrier: %+v", sent+1, r)
			}
			continue
		}
		sent++
		if err := s.Velocity.CountVerified(ctx, c.key(), c.carrier("glo"), h0, 26*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if sent != 15 {
		t.Errorf("glo, every code verified: %d sent, want its share, 15", sent)
	}
}

// TestCarrierExactUnderConcurrency: three instances sharing one Redis,
// 60 concurrent sends to glo (share 15) and 200 to mtn (share 135): exactly
// 15 and 135 are counted, together exactly the country's 150, and the
// carriers' counts match.
func TestCarrierExactUnderConcurrency(t *testing.T) {
	tg := redistest.New(t)
	insts := make([]*store.Redis, 3)
	for i := range insts {
		insts[i] = store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix)
	}
	c := carrierCountry{region: "TZ"}
	h0 := time.Now().Unix()/3600 - 50
	seedCarriers(t, insts[0].Velocity, c, h0)
	var allowed = map[string]*atomic.Int64{"glo": {}, "mtn": {}}
	var wg sync.WaitGroup
	for i := range 260 {
		carrier := "mtn"
		if i%13 < 3 {
			carrier = "glo"
		}
		wg.Go(func() {
			r, err := insts[i%len(insts)].Velocity.TakeVolume(context.Background(), c.take(h0, carrier, 0))
			if err != nil {
				t.Error(err)
				return
			}
			if r.Allowed {
				allowed[carrier].Add(1)
			}
		})
	}
	wg.Wait()
	if g, m := allowed["glo"].Load(), allowed["mtn"].Load(); g != 15 || m != 135 {
		t.Errorf("allowed: glo %d, mtn %d; want exactly 15 and 135", g, m)
	}
	r, err := insts[1].Velocity.TakeVolume(context.Background(), c.take(h0, "airtel", 0))
	if err != nil || r.Allowed || r.Carrier || r.Count != 150 {
		t.Errorf("after both: %+v, %v; want the country's refusal at exactly 150", r, err)
	}
}

// TestCarrierSolvedCut: the solved tier's cap is split among carriers by
// the same shares; a carrier's cut holds that carrier to a tenth of its
// share while another carrier keeps its own, and a refund gives back the
// carrier's solved count with the country's.
func TestCarrierSolvedCut(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			c := carrierCountry{region: "UG"}
			h0 := time.Now().Unix()/3600 - 50
			seedCarriers(t, s.Velocity, c, h0)
			key := func(name string) limit.Key { return limit.Key{Space: "otp:vel", ID: c.region, Name: name} }
			n := 0
			solved := func(carrier string) guard.VolumeTake {
				n++
				now := time.Unix(h0*3600+60, 0)
				return guard.VolumeTake{Key: key("solved"), Quarantine: key("solvedcut"), Now: now, Hour: h0, Lookback: 24,
					Floor: 10, QFloor: 1, Factor: 1, HistoryMinSends: 20,
					Solved: &guard.SolvedUse{Used: key(fmt.Sprintf("used:%d", n)), TTL: time.Minute, Base: c.key()},
					Carrier: guard.CarrierTake{Name: carrier, Key: key("c:" + carrier + ":solved"), Cut: key("c:" + carrier + ":solvedcut"),
						Share: c.carrier(carrier), Since: c.since(), FloorShare: 0.1}}
			}
			fill := func(carrier string) (int, guard.VolumeResult) {
				t.Helper()
				for got := 0; got < 1000; got++ {
					r, err := s.Velocity.TakeVolume(ctx, solved(carrier))
					if err != nil {
						t.Fatal(err)
					}
					if !r.Allowed {
						return got, r
					}
				}
				t.Fatal("never refused")
				return 0, guard.VolumeResult{}
			}
			// The country's cap is its baseline, 50; mtn's cut to a tenth of 45.
			if err := s.Velocity.Quarantine(ctx, key("c:mtn:solvedcut"), time.Unix((h0+1)*3600, 0), time.Hour); err != nil {
				t.Fatal(err)
			}
			if got, r := fill("mtn"); got != 4 || !r.Carrier || !r.Quarantined || r.Limit != 4 {
				t.Fatalf("mtn, cut: %d sent, refusal %+v; want 4, the carrier's cut cap", got, r)
			}
			// glo keeps its share, 10 % of 50.
			if got, r := fill("glo"); got != 5 || !r.Carrier || r.Quarantined || r.Limit != 5 {
				t.Fatalf("glo: %d sent, refusal %+v; want 5, its share", got, r)
			}
			if err := s.Velocity.RefundVolume(ctx, key("solved"), key("c:glo:solved"), time.Unix(h0*3600+60, 0)); err != nil {
				t.Fatal(err)
			}
			if got, _ := fill("glo"); got != 1 {
				t.Fatalf("glo after a refund: %d sent, want 1", got)
			}
		})
	}
}

// TestCarrierCountVerifiedOneRoundTrip: a verify's credit to the country
// and its carrier is one round trip (one MULTI, one slot).
func TestCarrierCountVerifiedOneRoundTrip(t *testing.T) {
	b := backends(t)["redis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	rt := &redistest.RoundTrips{}
	b.rdb.AddHook(rt)
	c := carrierCountry{region: "ZM"}
	h := time.Now().Unix() / 3600
	if err := s.Velocity.CountVerified(context.Background(), c.key(), c.carrier("mtn"), h, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := rt.N(); got != 1 {
		t.Errorf("round trips: got %d, want 1", got)
	}
	for _, k := range []string{b.prefix + "otp:vel:{ZM}:h", b.prefix + "otp:vel:{ZM}:c:mtn"} {
		if v, err := b.rdb.HGet(context.Background(), k, fmt.Sprintf("v:%d", h)).Int64(); err != nil || v != 1 {
			t.Errorf("%s v:<hour>: %d, %v; want 1", k, v, err)
		}
	}
}
