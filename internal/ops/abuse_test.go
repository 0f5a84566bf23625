package ops_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// fakeAbuseCounters keeps what AddAbuse was given; err fails the next call.
type fakeAbuseCounters struct {
	mu     sync.Mutex
	err    error
	counts map[string]int64
	alerts []ops.AbuseAlert
}

func (f *fakeAbuseCounters) AddAbuse(_ context.Context, counts []ops.AbuseCounts, alerts []ops.AbuseAlert, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		err := f.err
		f.err = nil
		return err
	}
	for _, c := range counts {
		for k, n := range c.Countries {
			f.counts["c "+k] += n
		}
		for k, n := range c.Prefixes {
			f.counts["p "+k] += n
		}
		for k, n := range c.Carriers {
			f.counts["k "+k] += n
		}
		for k, n := range c.Services {
			f.counts["s "+k] += n
		}
	}
	f.alerts = append(f.alerts, alerts...)
	return nil
}

func (f *fakeAbuseCounters) ReadAbuse(context.Context, []int64) (ops.AbuseData, error) {
	return ops.AbuseData{}, nil
}

func (f *fakeAbuseCounters) ReadVolumes(context.Context, []string, int64) ([]ops.CountryVolume, error) {
	return nil, nil
}

func (f *fakeAbuseCounters) ReadSolvedCaps(_ context.Context, takes []guard.VolumeTake) ([]ops.SolvedCap, error) {
	return make([]ops.SolvedCap, len(takes)), nil
}

func TestAbuseRecorder(t *testing.T) {
	st := &fakeAbuseCounters{counts: map[string]int64{}}
	pol := guard.DefaultPolicies().OTP
	now := time.Unix(1_780_000_000, 0)
	r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: func() guard.OTPPolicy { return pol }, Now: func() time.Time { return now }})
	send := func(outcome string) {
		r.Record(guard.Event{At: now, Action: guard.ActionOTPSend, Outcome: outcome, Phone: "+2348031234567", Country: "NG"})
	}
	send(guard.OutcomeSent)
	send("country_rate_limited")
	r.Record(guard.Event{At: now, Action: guard.ActionOTPVerify, Outcome: guard.OutcomeValid, Phone: "+2348031234567", Country: "NG"})
	r.Record(guard.Event{At: now, Action: guard.ActionOTPVerify, Outcome: "wrong_code", Phone: "+2348031234567", Country: "NG"})
	r.Record(guard.Event{At: now, Action: guard.ActionOTPSend, Outcome: "invalid_phone"}) // no number: no subject
	r.Record(guard.Event{At: now, Action: guard.ActionConversion, Outcome: guard.OutcomeBlocked, Country: "NG",
		Detail: "prefix=+234803123 conversion watch: ..."})
	// Risk lookups count per country (no number, no prefix); one the
	// budget did not allow was not asked.
	for _, outcome := range []string{"high", "error", "over_budget"} {
		r.Record(guard.Event{At: now, Action: guard.ActionRiskLookup, Outcome: outcome, Country: "NG"})
	}

	// A failed flush keeps the counts for the next.
	st.err = errors.New("redis: connection refused")
	if err := r.Flush(context.Background()); err == nil {
		t.Fatal("flush: want the store's error")
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"c NG|s": 1, "c NG|r": 1, "c NG|r:country_rate_limited": 1, "c NG|v": 1, "c NG|k": 2,
		"p +234803123|NG|0|s": 1, "p +234803123|NG|0|r": 1, "p +234803123|NG|0|v": 1,
		"p +2348031|NG|1|s": 1, "p +234803|NG|2|s": 1,
		// The number's carrier: sends, refusals, verifications, not by code.
		"k NG|mtn|MTN|s": 1, "k NG|mtn|MTN|r": 1, "k NG|mtn|MTN|v": 1, "k NG|mtn|MTN|r:country_rate_limited": 0,
	}
	for k, n := range want {
		if st.counts[k] != n {
			t.Errorf("%s: got %d, want %d (all: %v)", k, st.counts[k], n, st.counts)
		}
	}
	if len(st.alerts) != 1 || st.alerts[0].Subject != "+234803123" || !st.alerts[0].Until.Equal(now.Add(pol.Conversion.BlockFor)) {
		t.Errorf("alerts: %+v", st.alerts)
	}
	// A flush that timed out may have run: its counts are not sent again.
	send(guard.OutcomeSent)
	st.err = context.DeadlineExceeded
	_ = r.Flush(context.Background())
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st.counts["c NG|s"] != 1 {
		t.Errorf("after a timed-out flush: %d sends, want 1 (not re-sent)", st.counts["c NG|s"])
	}
}

func TestWholeCountries(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		whole   bool
	}{{"+1", true}, {"+44", true}, {"+2", true}, {"+234", true}, {"+2348", false}, {"+88213", false}, {"+447400123456", false}} {
		if got := len(ops.WholeCountries(tc.pattern)) > 0; got != tc.whole {
			t.Errorf("WholeCountries(%s): got %v, want %v", tc.pattern, got, tc.whole)
		}
	}
}
