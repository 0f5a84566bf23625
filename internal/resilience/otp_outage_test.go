package resilience_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
)

var outageHMACKey = []byte("0123456789abcdef0123456789abcdef")

// otpInstance is one instance: its own Fallback (memory, breaker) over the
// shared store.
func otpInstance(st *guardtest.OutageStore, p guard.OTPPolicy, box *guardtest.Outbox, now func() time.Time) *guard.OTP {
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Codes: st, Now: now})
	return guard.NewOTP(guard.OTPOptions{Policy: p, Counter: f, Codes: f, Sender: box, HMACKey: outageHMACKey,
		Now: now, LastStoreFailure: f.LastFailure})
}

func localOTP(localLimit int64) guard.OTPPolicy {
	p := guard.DefaultPolicies().OTP
	p.OnStoreError, p.LocalLimit = limit.FallbackLocal, localLimit
	p.Cooldown = 0
	return p
}

func wantCode(t *testing.T, err error, want problem.Code) {
	t.Helper()
	if got := problem.CodeOf(err); got != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
}

func TestOTPClosedSendsNothingWhileStoreDown(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	box := &guardtest.Outbox{}
	otp := otpInstance(st, guard.DefaultPolicies().OTP, box, nil)
	ctx := context.Background()
	for range 10 {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: "+14155550100"})
		wantCode(t, err, problem.CodeStoreUnavailable)
		var e *problem.Error
		if !errors.As(err, &e) || e.RetryAfter != time.Minute {
			t.Fatalf("retry after: got %+v, want 60s", e)
		}
	}
	_, err := otp.Verify(ctx, guard.VerifyRequest{Phone: "+14155550100", Code: "123456"})
	wantCode(t, err, problem.CodeStoreUnavailable)
	if n := box.Count(); n != 0 {
		t.Errorf("SMS sent while the store was down with on_store_error closed: %d, want 0", n)
	}
}

// TestOutageLogsOncePerChange: during an outage the breaker and the
// fallback say so once; the requests it refuses do not each add an error
// line on top (they log at debug).
func TestOutageLogsOncePerChange(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	const failures = 3 // in a row, to open the breaker
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Codes: st, Logger: log, Breaker: resilience.BreakerOptions{Failures: failures}})
	otp := guard.NewOTP(guard.OTPOptions{Policy: guard.DefaultPolicies().OTP, Counter: f, Codes: f, Sender: &guardtest.Outbox{},
		HMACKey: outageHMACKey, Logger: log, LastStoreFailure: f.LastFailure})
	lim := limit.New(map[string]limit.Policy{"api": {Algorithm: limit.FixedWindow, Limit: 5,
		Window: time.Minute, OnStoreError: limit.FallbackClosed}}, f, log)
	const n = 100
	for range n {
		_, err := otp.Send(t.Context(), guard.SendRequest{Phone: "+14155550100"})
		wantCode(t, err, problem.CodeStoreUnavailable)
		_, err = lim.Check(t.Context(), []limit.Check{{Policy: "api", Key: "user:1", Cost: 1}})
		wantCode(t, err, problem.CodeStoreUnavailable)
	}
	errorLines := strings.Count(logs.String(), `"level":"ERROR"`)
	t.Logf("%d refused decisions during an outage: %d error lines", 2*n, errorLines)
	// The failures that open the breaker may be errors (this fake store's
	// failure is not a timeout or a lost connection, which log at debug:
	// TestStoreFailureLevel); after it opens, nothing more at error level.
	if errorLines > failures {
		t.Errorf("%d error lines for %d refused decisions: want only the ones before the breaker opened\n%s", errorLines, 2*n, logs.String())
	}
}

func TestOTPLocalLimitPerInstance(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	box := &guardtest.Outbox{}
	const n, local = 3, 2
	var instances []*guard.OTP
	for range n {
		instances = append(instances, otpInstance(st, localOTP(local), box, nil))
	}
	sent := 0
	for round := range 5 {
		for i, otp := range instances {
			_, err := otp.Send(context.Background(), guard.SendRequest{Phone: "+14155550100", ClientIP: "203.0.113.9"})
			switch problem.CodeOf(err) {
			case "":
				sent++
			case problem.CodePhoneRateLimited:
			default:
				t.Fatalf("round %d instance %d: %v", round, i, err)
			}
		}
	}
	if sent != n*local || box.Count() != n*local {
		t.Errorf("sent %d (SMS %d), want N x local_limit = %d", sent, box.Count(), n*local)
	}
}

func TestOTPStatelessCodeVerifiesOnAnotherInstance(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	box := &guardtest.Outbox{}
	a := otpInstance(st, localOTP(1), box, nil)
	b := otpInstance(st, localOTP(1), box, nil)
	ctx := context.Background()
	const phone = "+14155550101"

	res, err := a.Send(ctx, guard.SendRequest{Phone: phone})
	if err != nil {
		t.Fatal(err)
	}
	ttl := guard.DefaultPolicies().OTP.CodeTTL
	if res.ExpiresIn <= ttl*2/3 || res.ExpiresIn > ttl {
		t.Errorf("expires in %v, want in (2/3 x %v, %v]", res.ExpiresIn, ttl, ttl)
	}
	code := box.Last(t)
	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	_, err = b.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: wrong})
	wantCode(t, err, problem.CodeWrongCode)
	if _, err := b.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code}); err != nil {
		t.Fatalf("the code sent by instance a does not verify on instance b: %v", err)
	}
	_, err = b.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code})
	wantCode(t, err, problem.CodeNoActiveCode)
}

func TestOTPStatelessGuessLimit(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	box := &guardtest.Outbox{}
	p := localOTP(1)
	a := otpInstance(st, p, box, nil)
	ctx := context.Background()
	const phone = "+14155550102"
	if _, err := a.Send(ctx, guard.SendRequest{Phone: phone}); err != nil {
		t.Fatal(err)
	}
	code := box.Last(t)
	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	for i := range p.MaxVerifyAttempts {
		_, err := a.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: wrong})
		wantCode(t, err, problem.CodeWrongCode)
		if left := *err.(*problem.Error).AttemptsLeft; left != p.MaxVerifyAttempts-i-1 {
			t.Errorf("guess %d: attempts left %d, want %d", i+1, left, p.MaxVerifyAttempts-i-1)
		}
	}
	_, err := a.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code})
	wantCode(t, err, problem.CodeTooManyAttempts)
}

func TestOTPStatelessCodeLivesWithinTTL(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	box := &guardtest.Outbox{}
	now := time.Date(2026, 3, 1, 12, 0, 7, 0, time.UTC)
	clock := func() time.Time { return now }
	p := localOTP(5)
	a := otpInstance(st, p, box, clock)
	ctx := context.Background()
	const phone = "+14155550103"
	res, err := a.Send(ctx, guard.SendRequest{Phone: phone})
	if err != nil {
		t.Fatal(err)
	}
	code := box.Last(t)
	sent := now

	now = sent.Add(res.ExpiresIn) // dead at the end of its life, on every instance
	_, err = otpInstance(st, p, box, clock).Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code})
	wantCode(t, err, problem.CodeWrongCode)

	now = sent.Add(res.ExpiresIn - time.Millisecond) // alive just before
	if _, err := otpInstance(st, p, box, clock).Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code}); err != nil {
		t.Errorf("verify just before expiry: %v", err)
	}
}

func TestOTPStatelessCodeAfterRecovery(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	box := &guardtest.Outbox{}
	a := otpInstance(st, localOTP(1), box, nil)
	ctx := context.Background()
	const phone = "+14155550104"
	if _, err := a.Send(ctx, guard.SendRequest{Phone: phone}); err != nil {
		t.Fatal(err)
	}
	code := box.Last(t)
	st.SetDown(false)

	// An instance that never saw the store fail does not accept stateless
	// codes: otherwise any number could be verified by guessing, no SMS sent.
	fresh := otpInstance(st, localOTP(1), box, nil)
	_, err := fresh.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code})
	wantCode(t, err, problem.CodeNoActiveCode)

	// One that did (within a code TTL) accepts it, once, through the store.
	if _, err := a.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code}); err != nil {
		t.Fatalf("verify after recovery: %v", err)
	}
	_, err = a.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code})
	wantCode(t, err, problem.CodeNoActiveCode)
	// A code sent now is a stored one again.
	if _, err := a.Send(ctx, guard.SendRequest{Phone: phone}); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: box.Last(t)}); err != nil {
		t.Errorf("a code sent after recovery does not verify on another instance: %v", err)
	}
}
