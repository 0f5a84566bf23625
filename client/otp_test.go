package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client"
)

const phone = "+919800000000"

func TestSendVerifyAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	c := newClient(t, g.URL)
	ctx := context.Background()

	sent, err := c.Send(ctx, client.SendRequest{Phone: "+91 98000 00000", ClientIP: "203.0.113.7"})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if sent.Phone != phone || sent.ExpiresIn != 300 || sent.Replayed {
		t.Errorf("Send = %+v, want phone %s, expires_in 300, not replayed", sent, phone)
	}

	// The cooldown refuses at once: a typed error with its code and wait.
	_, err = c.Send(ctx, client.SendRequest{Phone: phone, ClientIP: "203.0.113.7"})
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("second Send: got %v, want *client.Error", err)
	}
	if e.Status != http.StatusTooManyRequests || e.Code != client.CodeCooldown || e.RetryAfter != 30*time.Second || e.RequestID == "" {
		t.Errorf("second Send: got %+v, want 429 cooldown, RetryAfter 30s, a request id", e)
	}
	if !client.IsCode(err, client.CodeCooldown) || !errors.Is(err, &client.Error{Code: client.CodeCooldown}) {
		t.Errorf("IsCode / errors.Is do not see cooldown in %v", err)
	}
	if d, ok := client.RetryAfter(err); !ok || d != 30*time.Second {
		t.Errorf("RetryAfter(err) = %v, %v; want 30s, true", d, ok)
	}
	if g.out.count() != 1 {
		t.Errorf("SMS sent: got %d, want 1", g.out.count())
	}

	// A wrong guess: wrong_code with the attempts left; never retried.
	before := g.hitsOn("/otp/verify")
	_, err = c.Verify(ctx, client.VerifyRequest{Phone: phone, Code: "000000"})
	if !errors.As(err, &e) || e.Code != client.CodeWrongCode || e.AttemptsLeft == nil || *e.AttemptsLeft != 4 {
		t.Fatalf("wrong Verify: got %v (%+v), want wrong_code with 4 attempts left", err, e)
	}
	if n := g.hitsOn("/otp/verify") - before; n != 1 {
		t.Errorf("a wrong guess reached otpguard %d times, want 1", n)
	}

	v, err := c.Verify(ctx, client.VerifyRequest{Phone: phone, Code: g.out.lastCode(t, phone)})
	if err != nil || !v.Valid || v.Phone != phone {
		t.Fatalf("right Verify = %+v, %v; want valid", v, err)
	}
	_, err = c.Verify(ctx, client.VerifyRequest{Phone: phone, Code: g.out.lastCode(t, phone)})
	if !client.IsCode(err, client.CodeNoActiveCode) {
		t.Errorf("Verify of a used code: got %v, want no_active_code", err)
	}
}

func TestErrorsAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	ctx := context.Background()

	tests := []struct {
		name       string
		call       func(*client.Client) error
		opts       []client.Option
		wantStatus int
		wantCode   string
	}{
		{"wrong API key", func(c *client.Client) error {
			_, err := c.Send(ctx, client.SendRequest{Phone: phone})
			return err
		}, []client.Option{client.WithAPIKey("not-the-key-0123456789")}, 401, client.CodeUnauthorized},
		{"ops key needed", func(c *client.Client) error {
			_, err := c.Status(ctx)
			return err
		}, []client.Option{client.WithOpsKey(apiKey)}, 403, client.CodeForbidden},
		{"invalid phone", func(c *client.Client) error {
			_, err := c.Send(ctx, client.SendRequest{Phone: "12"})
			return err
		}, nil, 422, client.CodeInvalidPhone},
		{"unknown policy", func(c *client.Client) error {
			_, err := c.Check(ctx, client.Check{Policy: "nope", Key: "k"})
			return err
		}, nil, 404, client.CodeUnknownPolicy},
		{"bad key", func(c *client.Client) error {
			_, err := c.Check(ctx, client.Check{Policy: "default", Key: "has space"})
			return err
		}, nil, 422, client.CodeInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(newClient(t, g.URL, tt.opts...))
			var e *client.Error
			if !errors.As(err, &e) || e.Status != tt.wantStatus || e.Code != tt.wantCode {
				t.Errorf("got %v, want %d %s", err, tt.wantStatus, tt.wantCode)
			}
			if client.IsUnavailable(err) {
				t.Errorf("IsUnavailable(%v) = true, want false for a %d", err, tt.wantStatus)
			}
		})
	}
}

func TestOpsAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	c := newClient(t, g.URL)
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil || st.Redis != "up" || st.Instances < 1 || len(st.Policies) == 0 {
		t.Fatalf("Status = %+v, %v; want redis up, N >= 1, policies", st, err)
	}

	entry, err := c.Deny(ctx, client.DenyRequest{Pattern: "+91981110", Reason: "pumping", ExpiresIn: time.Hour})
	if err != nil || entry.ID == 0 || entry.Pattern != "+91981110" || entry.ExpiresAt == nil {
		t.Fatalf("Deny = %+v, %v", entry, err)
	}
	list, err := c.DenyList(ctx)
	if err != nil || len(list) != 1 || list[0].ID != entry.ID {
		t.Fatalf("DenyList = %+v, %v; want the one entry", list, err)
	}
	_, err = c.Send(ctx, client.SendRequest{Phone: "+919811100000"})
	if !client.IsCode(err, client.CodeDenied) {
		t.Errorf("Send to a denied prefix: got %v, want denied", err)
	}
	if err := c.RemoveDeny(ctx, entry.ID); err != nil {
		t.Fatalf("RemoveDeny: %v", err)
	}
	if err := c.RemoveDeny(ctx, entry.ID); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("RemoveDeny again: got %v, want not_found", err)
	}

	// A number in its cooldown is blocked; Unblock lifts it.
	if _, err := c.Send(ctx, client.SendRequest{Phone: phone}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, client.SendRequest{Phone: phone}); !client.IsCode(err, client.CodeCooldown) {
		t.Fatalf("second send: %v, want cooldown", err)
	}
	// LookUpNumber answers why: the cooldown, and the live code's two
	// wrong guesses of five (read without counting a third).
	right := g.out.lastCode(t, phone)
	for range 2 {
		wrong := map[bool]string{true: "111111", false: "000000"}[right == "000000"]
		if _, err := c.Verify(ctx, client.VerifyRequest{Phone: phone, Code: wrong}); !client.IsCode(err, client.CodeWrongCode) {
			t.Fatalf("wrong Verify: %v, want wrong_code", err)
		}
	}
	for range 2 { // a second look-up sees the same: looking counts nothing
		a, err := c.LookUpNumber(ctx, "+91 98000 00000")
		if err != nil || a.Phone != phone || len(a.Refusing) != 1 || a.Refusing[0].Code != "cooldown" {
			t.Fatalf("LookUpNumber = %+v, %v; want %s refused by its cooldown", a, err, phone)
		}
		if a.HasCode == nil || !*a.HasCode || a.Code == nil || a.Code.Guesses != 2 || a.Code.MaxAttempts != 5 || a.Code.Locked {
			t.Errorf("LookUpNumber's code = %+v (has %v), want 2 of 5 guesses, not locked", a.Code, a.HasCode)
		}
	}
	blocks, err := c.Blocked(ctx, client.BlockFilter{Phone: phone})
	if err != nil || blocks.Total != 1 || len(blocks.Blocks) != 1 || blocks.Blocks[0].Phone != phone {
		t.Fatalf("Blocked = %+v, %v; want the number", blocks, err)
	}
	un, err := c.Unblock(ctx, phone)
	if err != nil || un.Status != "unblocked" || un.Phone != phone {
		t.Fatalf("Unblock = %+v, %v", un, err)
	}
	if _, err := c.Send(ctx, client.SendRequest{Phone: phone}); err != nil {
		t.Errorf("send after Unblock: %v", err)
	}

	// The audit trail has it all, paged by NextBeforeID. Events are
	// written to SQL off the request path: read until they are there.
	want := []string{"ops.deny.add", "ops.deny.remove", "otp.send", "ops.unblock"}
	var actions map[string]int
	for try := 0; try < 200; try++ {
		actions = map[string]int{}
		f := client.EventFilter{Limit: 2}
		for range 50 {
			page, err := c.Events(ctx, f)
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			for _, e := range page.Events {
				actions[e.Action]++
			}
			if page.NextBeforeID == 0 {
				break
			}
			f.BeforeID = page.NextBeforeID
		}
		if hasAll(actions, want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !hasAll(actions, want) {
		t.Errorf("audit trail actions %v, want each of %v", actions, want)
	}
}

func hasAll(got map[string]int, want []string) bool {
	for _, a := range want {
		if got[a] == 0 {
			return false
		}
	}
	return true
}
