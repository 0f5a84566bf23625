package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestContestedRoundTrips counts the round trips a send waits on when a
// contested room takes it (guard/contested.go), on the shared client:
// its score is asked after the room's count, and it waits on the lookup
// and at most 2 round trips, as a solved-tier send does: sent (between),
// and refused (high), its place given back beside the cache's write.
func TestContestedRoundTrips(t *testing.T) {
	tg := redistest.New(t)
	f := &fakeRisk{answers: map[string]guard.RiskAnswer{}, def: guard.RiskAnswer{Score: 50}}
	a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) { p.CountryVelocity.Floor = 100 })
	// GB's room is contested, as a refusal in this hour leaves it (the
	// velocity script's mark; lua/take_volume.lua).
	room := tg.Prefix + "otp:vel:{GB}:h"
	ctx := context.Background()
	if err := a.Redis().HSet(ctx, room, fmt.Sprintf("x:%d", time.Now().Unix()/3600), 1).Err(); err != nil {
		t.Fatal(err)
	}
	trips := &requestTrips{hold: 200 * time.Millisecond}
	a.Redis().AddHook(trips)
	h := a.Handler()
	// fewest sends to each of phones in turn until one waits on at most 2
	// sequential round trips (a loaded machine may start a side-by-side
	// trip after its neighbour's was released), and returns the fewest.
	fewest := func(name string, want int, phones ...int) int {
		t.Helper()
		least := -1
		for _, i := range phones {
			calls := f.calls.Load()
			seq, _ := tripSend(t, h, trips, name, `{"phone":"`+gbNumber(7, i)+`"}`, want)
			if f.calls.Load() != calls+1 {
				t.Fatalf("%s: %d lookups, want 1", name, f.calls.Load()-calls)
			}
			if least < 0 || seq < least {
				least = seq
			}
			if least <= 2 {
				break
			}
		}
		return least
	}
	if got := fewest("a contested room's send, scored between", http.StatusOK, 1, 2, 3); got > 2 {
		t.Errorf("a contested room's send, scored between: %d sequential round trips, want at most 2", got)
	}
	f.set(func(f *fakeRisk) { f.def = guard.RiskAnswer{Score: 90} })
	if got := fewest("a contested room's send, scored high", http.StatusForbidden, 4, 5, 6); got > 2 {
		t.Errorf("a contested room's send, scored high: %d sequential round trips, want at most 2", got)
	}
}
