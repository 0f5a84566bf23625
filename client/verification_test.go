package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/client"
)

// verificationTarget is an otpguard that keeps the idempotency and
// verification contract, and how a test reads what it sent.
type verificationTarget struct {
	name  string
	url   string
	code  func(t *testing.T, phone string) string // the live code sent to phone
	sends func() int                              // SMS sent so far
}

// verificationTargets are the servers the verification tests run
// against: a real otpguard (app.New on a real Redis), and the fake of the
// contract (contract_fake_test.go), which also plays the cases a real
// server cannot be held in (a send still in flight). Every test below
// runs on both unchanged.
func verificationTargets(t *testing.T) []verificationTarget {
	f, url := newContractFake(t)
	g := startOTPGuard(t, nil)
	return []verificationTarget{{
		name: "otpguard", url: g.URL, code: g.out.lastCode, sends: g.out.count,
	}, {
		name: "contract-fake", url: url,
		code: func(_ *testing.T, phone string) string { return f.code(phone) },
		sends: func() int {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.sends
		},
	}}
}

func TestVerificationLifecycle(t *testing.T) {
	ctx := context.Background()
	for _, tg := range verificationTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			c := newClient(t, tg.url)
			sent, err := c.Send(ctx, client.SendRequest{Phone: phone})
			if err != nil || sent.VerificationID == "" || sent.Status != client.StatusPending {
				t.Fatalf("Send = %+v, %v; want a pending verification", sent, err)
			}
			v, err := c.Verification(ctx, sent.VerificationID)
			if err != nil || v.ID != sent.VerificationID || v.Status != client.StatusPending || v.MaxAttempts == 0 ||
				v.CreatedAt.IsZero() || !v.ExpiresAt.After(v.CreatedAt) {
				t.Fatalf("Verification = %+v, %v", v, err)
			}

			ok, err := c.Verify(ctx, client.VerifyRequest{Phone: phone, Code: tg.code(t, phone)})
			if err != nil || ok.VerificationID != sent.VerificationID || ok.Status != client.StatusApproved {
				t.Fatalf("Verify = %+v, %v; want approved", ok, err)
			}
			if v, err := c.Verification(ctx, sent.VerificationID); err != nil || v.Status != client.StatusApproved || v.Attempts != 1 {
				t.Errorf("after verify: %+v, %v; want approved after 1 attempt", v, err)
			}
			// An approved verification cannot be canceled.
			_, err = c.CancelVerification(ctx, sent.VerificationID)
			var e *client.Error
			if !errors.As(err, &e) || e.Status != 409 || e.Code != client.CodeVerificationNotPending {
				t.Errorf("cancel approved: %v, want 409 verification_not_pending", err)
			}
		})
	}
}

func TestVerificationCancelAndNotFound(t *testing.T) {
	ctx := context.Background()
	for _, tg := range verificationTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			c := newClient(t, tg.url)
			sent, err := c.Send(ctx, client.SendRequest{Phone: phone})
			if err != nil {
				t.Fatal(err)
			}
			code := tg.code(t, phone)
			v, err := c.CancelVerification(ctx, sent.VerificationID)
			if err != nil || v.Status != client.StatusCanceled {
				t.Fatalf("CancelVerification = %+v, %v; want canceled", v, err)
			}
			if _, err := c.Verify(ctx, client.VerifyRequest{Phone: phone, Code: code}); err == nil {
				t.Error("a canceled code verified")
			}
			if _, err := c.CancelVerification(ctx, sent.VerificationID); !client.IsCode(err, client.CodeVerificationNotPending) {
				t.Errorf("second cancel: %v, want verification_not_pending", err)
			}
			_, err = c.Verification(ctx, "ver_does_not_exist")
			if !errors.Is(err, &client.Error{Status: 404, Code: client.CodeVerificationNotFound}) {
				t.Errorf("unknown id: %v, want 404 verification_not_found", err)
			}
		})
	}
}

func TestVerificationMaxAttempts(t *testing.T) {
	ctx := context.Background()
	for _, tg := range verificationTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			c := newClient(t, tg.url)
			sent, err := c.Send(ctx, client.SendRequest{Phone: phone})
			if err != nil {
				t.Fatal(err)
			}
			v, _ := c.Verification(ctx, sent.VerificationID)
			for range v.MaxAttempts {
				if _, err := c.Verify(ctx, client.VerifyRequest{Phone: phone, Code: "000000"}); !client.IsCode(err, client.CodeWrongCode) {
					t.Fatalf("wrong guess: %v, want wrong_code", err)
				}
			}
			if v, err := c.Verification(ctx, sent.VerificationID); err != nil || v.Status != client.StatusMaxAttemptsReached || v.Attempts != v.MaxAttempts {
				t.Errorf("after %d wrong guesses: %+v, %v; want max_attempts_reached", v.MaxAttempts, v, err)
			}
		})
	}
}

func TestIdempotentSend(t *testing.T) {
	ctx := context.Background()
	for _, tg := range verificationTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			c := newClient(t, tg.url)
			req := client.SendRequest{Phone: phone, ClientIP: "203.0.113.7", IdempotencyKey: "signup-42-attempt-1"}
			first, err := c.Send(ctx, req)
			if err != nil || first.Replayed {
				t.Fatalf("first Send = %+v, %v", first, err)
			}
			again, err := c.Send(ctx, req)
			if err != nil || !again.Replayed || again.VerificationID != first.VerificationID {
				t.Fatalf("repeat = %+v, %v; want the first answer, replayed", again, err)
			}
			if n := tg.sends(); n != 1 {
				t.Errorf("SMS sent: %d, want 1", n)
			}
			req.ClientIP = "203.0.113.8"
			_, err = c.Send(ctx, req)
			var e *client.Error
			if !errors.As(err, &e) || e.Status != 422 || e.Code != client.CodeIdempotencyKeyReused {
				t.Errorf("same key, other body: %v, want 422 idempotency_key_reused", err)
			}
		})
	}
}

// TestIdempotentSendConcurrent: many copies of one keyed send at once
// send one SMS and all get its answer; the copies that find the first in
// flight are retried by the client until it is answered.
func TestIdempotentSendConcurrent(t *testing.T) {
	f, url := newContractFake(t) // fake-only: it holds the first send in flight
	f.hold, f.held = make(chan struct{}), make(chan struct{}, 100)
	c := newClient(t, url, client.WithRetries(0, 0))
	ctx := context.Background()
	req := client.SendRequest{Phone: phone, IdempotencyKey: "k-1"}

	done := make(chan error, 1)
	go func() { _, err := c.Send(ctx, req); done <- err }()
	<-f.held // the first is in flight
	_, err := c.Send(ctx, req)
	if d, ok := client.RetryAfter(err); !client.IsCode(err, client.CodeIdempotencyKeyInProgress) || !ok || d.Seconds() != 1 {
		t.Fatalf("copy while the first is in flight: %v, want 409 idempotency_key_in_progress with Retry-After 1", err)
	}
	close(f.hold)
	if err := <-done; err != nil {
		t.Fatalf("first: %v", err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			res, err := c.Send(ctx, req)
			if err != nil || !res.Replayed {
				t.Errorf("copy after: %+v, %v; want the replayed answer", res, err)
			}
		})
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sends != 1 {
		t.Errorf("SMS sent: %d, want 1", f.sends)
	}
}
