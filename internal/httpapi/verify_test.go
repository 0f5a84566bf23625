package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const phone = "+919800000000"

func sendTo(t *testing.T, c *cluster, i int) {
	t.Helper()
	if r := c.do(t, i, "POST", "/otp/send", `{"phone":"`+phone+`"}`); r.Status != 200 {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
}

func verify(t *testing.T, c *cluster, i int, code string) response {
	t.Helper()
	return c.do(t, i, "POST", "/otp/verify", verifyBody(code))
}

// verifyBody writes the number in another format than the sends do.
func verifyBody(code string) string {
	return fmt.Sprintf(`{"phone":"+91 98000-00000","code":%q}`, code)
}

// wrong returns a code of the right shape that is not code.
func wrong(code string) string {
	if code == "000000" {
		return "111111"
	}
	return "000000"
}

func TestVerify(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.MaxVerifyAttempts = 3
	p.OTP.PerPhone.Limit = 100
	c := realCluster(t, 2, p)

	t.Run("right code once, on any instance", func(t *testing.T) {
		sendTo(t, c, 0)
		code := c.out.LastCode(t, phone)
		if r := verify(t, c, 1, code); r.Status != 200 || r.json(t)["valid"] != true {
			t.Fatalf("verify: %d %s, want 200 valid", r.Status, r.Body)
		}
		r := verify(t, c, 0, code)
		if r.Status != 400 || r.json(t)["code"] != "no_active_code" {
			t.Fatalf("second verify: %d %s, want 400 no_active_code", r.Status, r.Body)
		}
	})

	t.Run("wrong guesses count down, then lock even the right code", func(t *testing.T) {
		sendTo(t, c, 0)
		code := c.out.LastCode(t, phone)
		for left := 2; left >= 0; left-- {
			r := verify(t, c, left, wrong(code))
			if r.Status != 400 || r.json(t)["code"] != "wrong_code" || r.json(t)["attempts_left"] != float64(left) {
				t.Fatalf("wrong guess: %d %s, want 400 wrong_code attempts_left %d", r.Status, r.Body, left)
			}
		}
		r := verify(t, c, 0, code)
		// No cooldown and the number's window far from spent: a new code
		// may be requested at once, so no Retry-After (the send below
		// proves it).
		if r.Status != 429 || r.json(t)["code"] != "too_many_attempts" || r.Header.Get("Retry-After") != "" {
			t.Fatalf("right code after lock-out: %d %s (Retry-After %q), want 429 too_many_attempts without Retry-After",
				r.Status, r.Body, r.Header.Get("Retry-After"))
		}
		// A new code unlocks, with a fresh guess count.
		sendTo(t, c, 1)
		if r := verify(t, c, 1, c.out.LastCode(t, phone)); r.Status != 200 {
			t.Fatalf("new code after lock-out: %d %s, want 200", r.Status, r.Body)
		}
	})

	t.Run("a new code replaces the old one", func(t *testing.T) {
		sendTo(t, c, 0)
		old := c.out.LastCode(t, phone)
		sendTo(t, c, 1)
		fresh := c.out.LastCode(t, phone)
		if old != fresh {
			if r := verify(t, c, 0, old); r.Status != 400 {
				t.Fatalf("old code: %d %s, want 400", r.Status, r.Body)
			}
		}
		if r := verify(t, c, 0, fresh); r.Status != 200 {
			t.Fatalf("new code: %d %s, want 200", r.Status, r.Body)
		}
	})

	t.Run("concurrent correct guesses: exactly one wins", func(t *testing.T) {
		sendTo(t, c, 0)
		code := c.out.LastCode(t, phone)
		statuses := burst(t, c, 40, "/otp/verify", func(int) string { return verifyBody(code) })
		// The guess limit (3) also refuses some: what matters is one 200.
		if statuses[200] != 1 {
			t.Fatalf("statuses %v, want exactly one 200", statuses)
		}
	})

	t.Run("concurrent wrong guesses: exactly max are judged", func(t *testing.T) {
		sendTo(t, c, 0)
		code := c.out.LastCode(t, phone)
		const n = 50
		statuses := burst(t, c, n, "/otp/verify", func(int) string { return verifyBody(wrong(code)) })
		if statuses[400] != 3 || statuses[429] != n-3 {
			t.Fatalf("statuses %v, want 3 x 400 (judged) and %d x 429", statuses, n-3)
		}
	})
}

func TestCodeExpires(t *testing.T) {
	p := defaults()
	p.OTP.CodeTTL = time.Minute
	c, m := miniCluster(t, 1, p)
	sendTo(t, c, 0)
	code := c.out.LastCode(t, phone)
	m.FastForward(61 * time.Second)
	if r := verify(t, c, 0, code); r.Status != 400 || r.json(t)["code"] != "no_active_code" {
		t.Fatalf("verify after expiry: %d %s, want 400 no_active_code", r.Status, r.Body)
	}
}

func TestProviderFailure(t *testing.T) {
	c, _ := miniCluster(t, 1, defaults())
	c.out.SetFail(fmt.Errorf("boom"))
	r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
	if r.Status != 502 || r.json(t)["code"] != "provider_unavailable" {
		t.Fatalf("send with a failing provider: %d %s, want 502 provider_unavailable", r.Status, r.Body)
	}
	if got := string(r.Body); len(got) > 0 && strings.Contains(got, "boom") {
		t.Errorf("response leaks the internal error: %s", got)
	}
	// No code was delivered, so none may be guessable.
	if r := verify(t, c, 0, "123456"); r.json(t)["code"] != "no_active_code" {
		t.Errorf("verify after a failed send: %s, want no_active_code", r.Body)
	}
}
