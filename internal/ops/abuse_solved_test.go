package ops_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// hourCounters is an AbuseCounters that keeps each hour's counts apart and
// reads them back as the store does. The solved caps it is asked for
// are kept (asked), each answered its floor as the limit and, for a
// carrier, its floor share in thousandths as what it holds.
type hourCounters struct {
	mu    sync.Mutex
	hours map[int64]ops.AbuseHour
	asked []guard.VolumeTake
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

func (h *hourCounters) ReadSolvedCaps(_ context.Context, takes []guard.VolumeTake) ([]ops.SolvedCap, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = append(h.asked, takes...)
	out := make([]ops.SolvedCap, len(takes))
	for i, t := range takes {
		out[i] = ops.SolvedCap{Limit: t.Floor, Used: int64(t.Carrier.FloorShare * 1000), Cut: t.Carrier.FloorShare > 0}
	}
	return out, nil
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

// TestAbuseViewSolvedCaps: with challenges on, each country row and each
// of its carriers (when the carriers split the country's room) is asked
// its solved cap by the take a solved send would make
// (guard.SolvedCapTake), once whatever the windows, and carries the
// answer; the "other" rows and a policy without challenges ask nothing.
func TestAbuseViewSolvedCaps(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	const mtn, glo = "+2348031234567", "+2348051234567" // NG / MTN, NG / Glo
	on := guard.DefaultPolicies().OTP
	on.Challenge.Floor = 40
	on.CountryVelocity.Mode = guard.VelocityOff // hourCounters reads no velocity state
	noSplit := on
	noSplit.CountryVelocity.CarrierSplit = false
	off := on
	off.Challenge.Type = guard.ChallengeOff
	tests := []struct {
		name      string
		policy    guard.OTPPolicy
		wantAsked []string // "<country solved key>|<carrier solved key>"
		wantNG    *ops.SolvedCap
		wantMTN   *ops.SolvedCap
	}{
		{"challenges on, carriers split", on, []string{"NG|", "NG|c:glo:solved", "NG|c:mtn:solved"},
			&ops.SolvedCap{Limit: 40}, &ops.SolvedCap{Limit: 40, Used: 100, Cut: true}},
		{"carriers not split: the country's cap alone", noSplit, []string{"NG|"}, &ops.SolvedCap{Limit: 40}, nil},
		{"challenges off: no solved cap", off, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &hourCounters{hours: map[int64]ops.AbuseHour{}}
			policy := func() guard.OTPPolicy { return tt.policy }
			r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: policy, Now: func() time.Time { return now }})
			for _, phone := range []string{mtn, mtn, glo} {
				r.Record(guard.Event{At: now, Action: guard.ActionOTPSend, Outcome: guard.OutcomeSent, Phone: phone, Country: "NG"})
			}
			if err := r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			d := ops.NewAbuseDesk(ops.AbuseDeskOptions{Store: st, Policy: policy, Now: func() time.Time { return now }})
			rep, err := d.Read(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			var asked []string
			for _, k := range st.asked {
				asked = append(asked, k.Key.ID+"|"+k.Carrier.Key.Name)
				if k.Hour != now.Unix()/3600 || k.Solved == nil || k.Solved.Base.ID != "NG" {
					t.Errorf("take %+v: want the hour under way and NG's baseline", k)
				}
			}
			slices.Sort(asked)
			if diff := cmp.Diff(tt.wantAsked, asked); diff != "" {
				t.Errorf("asked (-want +got):\n%s", diff)
			}
			for _, w := range rep.Windows {
				c := w.Countries[0]
				if diff := cmp.Diff(tt.wantNG, c.SolvedCap); diff != "" {
					t.Errorf("%s: NG's solved cap (-want +got):\n%s", w.Name, diff)
				}
				for _, k := range c.Carriers {
					if k.Key == "mtn" {
						if diff := cmp.Diff(tt.wantMTN, k.SolvedCap); diff != "" {
							t.Errorf("%s: NG / MTN's solved cap (-want +got):\n%s", w.Name, diff)
						}
					}
				}
			}
		})
	}
}
