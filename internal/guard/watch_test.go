package guard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
)

// fakeConversions is a hand-written guard.Conversions (not a batcher: one
// call per event). block, when set, holds CountConversion until closed,
// after telling entered.
type fakeConversions struct {
	mu      sync.Mutex
	events  []guard.ConversionKind
	tally   guard.Tally
	claims  []limit.Key
	block   chan struct{}
	entered chan struct{}
}

func (f *fakeConversions) CountConversion(_ context.Context, kind guard.ConversionKind, _ time.Time, _, _ time.Duration, subjects []limit.Key) ([]guard.Tally, error) {
	if f.block != nil {
		f.entered <- struct{}{}
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, kind)
	out := make([]guard.Tally, len(subjects))
	for i := range out {
		out[i] = f.tally
	}
	return out, nil
}

func (f *fakeConversions) ClaimAlert(_ context.Context, k limit.Key, _ time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims = append(f.claims, k)
	return true, nil
}

func (f *fakeConversions) ReleaseAlert(context.Context, limit.Key) error { return nil }

func (f *fakeConversions) counted() []guard.ConversionKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]guard.ConversionKind(nil), f.events...)
}

func watchOTP(t *testing.T, conv guard.Conversions, queue int) *guard.OTP {
	t.Helper()
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.PerPhone.Limit = 1000
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	p.OTP.Conversion = guard.ConversionPolicy{Mode: guard.ConversionMonitor, MinRate: 0.5, MinSends: 1, BlockFor: time.Hour}
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	st := guardtest.NewOutageStore()
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
		Conversions: conv, WatchQueue: queue})
	t.Cleanup(otp.Close)
	return otp
}

// TestWatchRunsAfterTheAnswer: a send returns before the watch counts it;
// Flush waits until it was counted and judged (the alert raised), in the
// order of the requests.
func TestWatchRunsAfterTheAnswer(t *testing.T) {
	conv := &fakeConversions{tally: guard.Tally{Sends: 5}, block: make(chan struct{}), entered: make(chan struct{}, 10)}
	otp := watchOTP(t, conv, 0)
	ctx := context.Background()
	if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+447400123456"}); err != nil {
		t.Fatal(err)
	}
	<-conv.entered // the drainer holds the event: the send answered without it
	if got := conv.counted(); len(got) != 0 {
		t.Fatalf("counted before the store answered: %v", got)
	}
	close(conv.block)
	if _, err := otp.Verify(ctx, guard.VerifyRequest{Phone: "+447400123456", Code: "000000"}); err == nil {
		t.Fatal("a wrong code verified")
	}
	if err := otp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := conv.counted(); len(got) != 1 || got[0] != guard.ConversionSend {
		t.Errorf("counted %v, want the one send (a wrong code is no verify)", got)
	}
	conv.mu.Lock()
	claims := len(conv.claims)
	conv.mu.Unlock()
	// 0 verified of 5: every subject (three prefix depths, the country) alerts.
	if claims != 4 {
		t.Errorf("alert claims after Flush: %d, want 4", claims)
	}
}

// TestWatchQueueOverflowIsCounted: with the drainer stuck on a slow store,
// a full queue drops new events and counts them; no send waits.
func TestWatchQueueOverflowIsCounted(t *testing.T) {
	conv := &fakeConversions{block: make(chan struct{}), entered: make(chan struct{}, 10)}
	otp := watchOTP(t, conv, 2)
	ctx := context.Background()
	send := func(i int) {
		t.Helper()
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: fmt.Sprintf("+4474001%05d", i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	send(0)
	<-conv.entered // the drainer took event 0 and waits on the store
	for i := 1; i <= 7; i++ {
		send(i) // 1 and 2 fill the queue; 3..7 are dropped
	}
	if got := otp.WatchDropped(); got != 5 {
		t.Errorf("dropped %d, want 5", got)
	}
	if got := otp.WatchQueued(); got != 2 {
		t.Errorf("queued %d, want 2", got)
	}
	close(conv.block)
	go func() { // the later calls tell entered too
		for range conv.entered {
		}
	}()
	otp.Close() // drains what is queued
	close(conv.entered)
	if got := len(conv.counted()); got != 3 {
		t.Errorf("counted %d events, want 3 (1 taken + 2 queued)", got)
	}
	// After Close nothing is queued: a late event is dropped, not stuck.
	send(8)
	if got := otp.WatchDropped(); got != 6 {
		t.Errorf("dropped after Close: %d, want 6", got)
	}
	if err := otp.Flush(ctx); err != nil {
		t.Errorf("Flush after Close: %v", err)
	}
}
