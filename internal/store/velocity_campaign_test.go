package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// velocityPopulation is one country's traffic in TestVelocityAllowanceByHour:
// how many sends it tries each hour and the share of the sent codes it
// verifies.
type velocityPopulation struct {
	country string
	tries   int
	verify  float64
}

// runVelocityHour tries p's sends of hour h, alternating between the
// instances (one Redis, several clients), verifies p.verify of the codes
// that left, and answers the sends that left and the hour's limit.
func runVelocityHour(t *testing.T, insts []*store.Redis, p velocityPopulation, h int64) (sent, lim int64) {
	t.Helper()
	ctx := context.Background()
	key := limit.Key{Space: "otp:vel", ID: p.country, Name: "h"}
	qkey := limit.Key{Space: "otp:vel", ID: p.country, Name: "quarantine"}
	for i := range p.tries {
		tk := guard.VolumeTake{Key: key, Quarantine: qkey, Now: time.Unix(h*3600+int64(i%3600), 0), Hour: h,
			Lookback: 168, Floor: 50, QFloor: 5, Factor: 3, HistoryMinSends: 200}
		r, err := insts[i%len(insts)].Velocity.TakeVolume(ctx, tk)
		if err != nil {
			t.Fatal(err)
		}
		lim = r.Limit
		if !r.Allowed {
			break // the rest of the hour is refused too
		}
		sent++
	}
	// Verified codes, exact: the share of the sends, rounded down.
	for i := range int64(float64(sent)*p.verify + 1e-9) {
		if err := insts[int(i)%len(insts)].Velocity.CountVerified(ctx, key, limit.Key{}, h, 170*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return sent, lim
}

// TestVelocityAllowanceByHour drives the country velocity script over the
// hours of a campaign on a real Redis, two instances: an attacker that
// verifies 30 % of its codes, in a country without history, tries 2,400
// sends an hour for 10 hours; a real population (85 % verify, a steady 100
// an hour after two days of history) runs beside it in its own country.
// The attacker's hourly allowance must not grow over the campaign (an
// hour's credit is its verified sends, so 3 x 30 % of the floor stays
// under the floor), and the real users must never be refused.
func TestVelocityAllowanceByHour(t *testing.T) {
	tg := redistest.New(t)
	insts := []*store.Redis{
		store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix),
		store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix),
	}
	h0 := time.Now().Unix()/3600 - 100 // hours of the driven clock, in the past: no clash with the wall clock
	real := velocityPopulation{country: "GB", tries: 100, verify: 0.85}
	for h := h0 - 48; h < h0; h++ { // two days of the real population's history, from a cold start
		runVelocityHour(t, insts, real, h)
	}
	attacker := velocityPopulation{country: "NG", tries: 2400, verify: 0.30}
	var byHour []string
	var first int64
	for i := range int64(10) {
		sent, lim := runVelocityHour(t, insts, attacker, h0+i)
		realSent, realLimit := runVelocityHour(t, insts, real, h0+i)
		byHour = append(byHour, fmt.Sprint(sent))
		t.Logf("hour %d: attacker (30 %% verified) %d SMS, limit %d; real users (85 %%) %d of %d, limit %d",
			i+1, sent, lim, realSent, real.tries, realLimit)
		if i == 0 {
			first = sent
		}
		if sent > first {
			t.Errorf("hour %d: the 30 %%-verifying attacker got %d SMS, more than its first hour's %d: its allowance grows", i+1, sent, first)
		}
		if realSent != int64(real.tries) {
			t.Errorf("hour %d: %d of %d real sends left; real users lost their allowance", i+1, realSent, real.tries)
		}
	}
	t.Logf("attacker SMS by hour: %s", strings.Join(byHour, ", "))
}
