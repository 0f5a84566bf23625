package ops_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// hourCounters is an AbuseCounters that keeps each hour's counts apart and
// reads them back as the store does.
type hourCounters struct {
	mu    sync.Mutex
	hours map[int64]ops.AbuseHour
}

func (h *hourCounters) AddAbuse(_ context.Context, counts []ops.AbuseCounts, _ []ops.AbuseAlert, _ time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range counts {
		got, ok := h.hours[c.Hour]
		if !ok {
			got = ops.AbuseHour{Hour: c.Hour, Countries: map[string]int64{}, Prefixes: map[string]int64{}, Carriers: map[string]int64{}}
		}
		for _, m := range [][2]map[string]int64{{got.Countries, c.Countries}, {got.Prefixes, c.Prefixes}, {got.Carriers, c.Carriers}} {
			for f, n := range m[1] {
				m[0][f] += n
			}
		}
		h.hours[c.Hour] = got
	}
	return nil
}

func (h *hourCounters) ReadAbuse(_ context.Context, hours []int64) (ops.AbuseData, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d ops.AbuseData
	for _, n := range hours {
		got, ok := h.hours[n]
		if !ok {
			got = ops.AbuseHour{Hour: n}
		}
		d.Hours = append(d.Hours, got)
	}
	return d, nil
}

func (h *hourCounters) ReadVolumes(context.Context, []string, int64) ([]ops.CountryVolume, error) {
	return nil, nil
}

// TestAbuseViewSolved: the sends after a solved challenge and the solved
// cap's refusals (guard.Event.Solved) are counted per country and carrier
// and read back in their rows, the cap's refusals apart from the velocity
// rule's of the same code; a row is marked spent only when the cap refused
// in the clock hour under way, and the report names those countries.
func TestAbuseViewSolved(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	const mtn, glo = "+2348031234567", "+2348051234567" // NG / MTN, NG / Glo
	sent := func(phone string, solved bool) guard.Event {
		return guard.Event{Outcome: guard.OutcomeSent, Phone: phone, Country: "NG", Solved: solved}
	}
	capped := guard.Event{Outcome: "unusual_volume", Phone: mtn, Country: "NG", Solved: true}
	velocity := guard.Event{Outcome: "unusual_volume", Phone: glo, Country: "NG"}
	type row struct {
		Sends, Solved, Refusals, SolvedCapped int64
		Spent                                 bool
	}
	tests := []struct {
		name       string
		events     []guard.Event
		ago        time.Duration // how long before now the events were
		country    row
		carriers   map[string]row
		spentIn    []string
		unusualVol int64 // refusals by code unusual_volume
	}{
		{"solved sends", []guard.Event{sent(mtn, true), sent(mtn, true), sent(glo, false)}, 0,
			row{Sends: 3, Solved: 2}, map[string]row{"MTN": {Sends: 2, Solved: 2}, "Glo": {Sends: 1}}, nil, 0},
		{"the solved cap refused this hour", []guard.Event{sent(mtn, true), capped}, 0,
			row{Sends: 1, Solved: 1, Refusals: 1, SolvedCapped: 1, Spent: true},
			map[string]row{"MTN": {Sends: 1, Solved: 1, Refusals: 1, SolvedCapped: 1, Spent: true}}, []string{"NG"}, 1},
		{"the velocity rule refused: not the solved cap", []guard.Event{sent(glo, false), velocity}, 0,
			row{Sends: 1, Refusals: 1}, map[string]row{"Glo": {Sends: 1, Refusals: 1}}, nil, 1},
		{"the solved cap refused last hour: not spent now", []guard.Event{capped}, time.Hour,
			row{Refusals: 1, SolvedCapped: 1}, map[string]row{"MTN": {Refusals: 1, SolvedCapped: 1}}, nil, 1},
	}
	pol := guard.DefaultPolicies().OTP
	pol.CountryVelocity.Mode = guard.VelocityOff
	policy := func() guard.OTPPolicy { return pol }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &hourCounters{hours: map[int64]ops.AbuseHour{}}
			r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: policy, Now: func() time.Time { return now }})
			for _, e := range tt.events {
				e.At, e.Action = now.Add(-tt.ago), guard.ActionOTPSend
				r.Record(e)
			}
			if err := r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			d := ops.NewAbuseDesk(ops.AbuseDeskOptions{Store: st, Policy: policy, Now: func() time.Time { return now }})
			rep, err := d.Read(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Windows[0].Countries) != 1 {
				t.Fatalf("rows %+v, want NG's", rep.Windows[0].Countries)
			}
			c := rep.Windows[0].Countries[0]
			got := row{c.Sends, c.Solved, c.Refusals, c.SolvedCapped, c.SolvedCapSpent}
			if got != tt.country {
				t.Errorf("NG: got %+v, want %+v", got, tt.country)
			}
			if n := c.ByCode["unusual_volume"]; n != tt.unusualVol {
				t.Errorf("NG's unusual_volume refusals: got %d, want %d", n, tt.unusualVol)
			}
			gotCarriers := map[string]row{}
			for _, k := range c.Carriers {
				gotCarriers[k.Name] = row{k.Sends, k.Solved, k.Refusals, k.SolvedCapped, k.SolvedCapSpent}
			}
			if diff := cmp.Diff(tt.carriers, gotCarriers); diff != "" {
				t.Errorf("carriers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.spentIn, rep.SolvedCapSpent); diff != "" {
				t.Errorf("solved cap spent in (-want +got):\n%s", diff)
			}
		})
	}
}
