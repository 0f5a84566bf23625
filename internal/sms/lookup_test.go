package sms_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sms"
	"github.com/otpguard/otpguard/internal/sms/smstest"
)

const (
	lookupSID   = "AC00000000000000000000000000000001"
	lookupToken = "token0123456789"
)

func newLookup(t *testing.T, f *smstest.Lookup, o sms.LookupOptions) *sms.Lookup {
	t.Helper()
	o.AccountSID, o.AuthToken, o.BaseURL = lookupSID, lookupToken, f.URL
	l, err := sms.NewLookup(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLookupMagicNumbers: the real twilio-go client against the fake
// Lookup API reads each magic number's score, carrier risk, block and
// line type.
func TestLookupMagicNumbers(t *testing.T) {
	f := smstest.NewLookup(t, lookupSID, lookupToken)
	l := newLookup(t, f, sms.LookupOptions{})
	numbers := map[string]smstest.LookupAnswer{"+2348031234567": smstest.DefaultLookupAnswer}
	for n, a := range smstest.LookupAnswers {
		numbers[n] = a
	}
	for n, want := range numbers {
		t.Run(guard.MaskPhone(n), func(t *testing.T) {
			got, err := l.LookupRisk(context.Background(), n)
			if err != nil {
				t.Fatal(err)
			}
			w := guard.RiskAnswer{Score: want.Score, CarrierRisk: want.CarrierRisk, Blocked: want.Blocked, LineType: want.LineType}
			if diff := cmp.Diff(w, got, cmpopts.IgnoreFields(guard.RiskAnswer{}, "At")); diff != "" {
				t.Errorf("LookupRisk (-want +got):\n%s", diff)
			}
		})
	}
	if got, want := f.Calls(), int64(len(numbers)); got != want {
		t.Errorf("%d lookups reached the fake, want %d (no retries)", got, want)
	}
}

// TestLookupFailures: a 500, a wrong credential, a hung or slow API (past
// the timeout) and a call past MaxInFlight are errors, each one call at
// most (never retried), and none names the number in clear.
func TestLookupFailures(t *testing.T) {
	f := smstest.NewLookup(t, lookupSID, lookupToken)
	l := newLookup(t, f, sms.LookupOptions{Timeout: 200 * time.Millisecond, MaxInFlight: 1})
	ask := func(name string) error {
		t.Helper()
		before := f.Calls()
		_, err := l.LookupRisk(context.Background(), smstest.MagicLow)
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if strings.Contains(err.Error(), smstest.MagicLow) {
			t.Errorf("%s: the error names the number: %v", name, err)
		}
		if n := f.Calls() - before; n > 1 {
			t.Errorf("%s: %d calls, want at most 1 (no retries)", name, n)
		}
		return err
	}
	f.SetMode(smstest.Lookup500)
	_ = ask("500") // ask holds the error itself
	f.SetMode(smstest.LookupHang)
	start := time.Now()
	_ = ask("hang")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("hang: gave up after %s, want about the 200ms timeout", d)
	}
	f.Delay = time.Second
	f.SetMode(smstest.LookupSlow)
	_ = ask("slow")

	// One call hangs and holds the only slot: the next fails at once.
	f.SetMode(smstest.LookupHang)
	long := newLookup(t, f, sms.LookupOptions{Timeout: 2 * time.Second, MaxInFlight: 1})
	before := f.Calls()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = long.LookupRisk(context.Background(), smstest.MagicLow) })
	for deadline := time.Now().Add(5 * time.Second); f.Calls() == before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // until the first call holds the slot at the fake
	}
	if _, err := long.LookupRisk(context.Background(), smstest.MagicLow); !errors.Is(err, sms.ErrLookupBusy) {
		t.Errorf("past MaxInFlight: %v, want ErrLookupBusy", err)
	}
	wg.Wait()

	f.SetMode(smstest.LookupOK)
	bad, err := sms.NewLookup(sms.LookupOptions{AccountSID: lookupSID, AuthToken: "wrong0token", BaseURL: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.LookupRisk(context.Background(), smstest.MagicLow); err == nil {
		t.Error("wrong credentials: no error")
	}
}
