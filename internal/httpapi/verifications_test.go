package httpapi_test

import (
	"sync"
	"testing"
	"time"
)

func sendID(t *testing.T, c *cluster, i int, phone string) string {
	t.Helper()
	r := c.do(t, i, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
	if r.Status != 200 || r.json(t)["status"] != "pending" {
		t.Fatalf("send: %d %s, want 200 pending", r.Status, r.Body)
	}
	id, _ := r.json(t)["verification_id"].(string)
	if id == "" {
		t.Fatalf("send: %s has no verification_id", r.Body)
	}
	return id
}

func statusOf(t *testing.T, c *cluster, i int, id string) (string, map[string]any) {
	t.Helper()
	r := c.do(t, i, "GET", "/otp/verifications/"+id, "")
	if r.Status != 200 {
		t.Fatalf("GET verification: %d %s", r.Status, r.Body)
	}
	b := r.json(t)
	return b["status"].(string), b
}

// TestVerificationLifecycleHTTP walks every transition through the API,
// over two instances on one real Redis.
func TestVerificationLifecycleHTTP(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.MaxVerifyAttempts = 3
	p.OTP.PerPhone.Limit = 1000
	c := realCluster(t, 2, p)

	t.Run("pending, then approved; an approved one cannot be canceled", func(t *testing.T) {
		id := sendID(t, c, 0, phone)
		st, b := statusOf(t, c, 1, id)
		if st != "pending" || b["to"] != phone || b["attempts"] != 0.0 || b["max_attempts"] != 3.0 {
			t.Fatalf("new verification: %v", b)
		}
		code := c.out.LastCode(t, phone)
		verify(t, c, 1, wrong(code))
		r := verify(t, c, 0, code)
		if r.Status != 200 || r.json(t)["verification_id"] != id || r.json(t)["status"] != "approved" {
			t.Fatalf("verify: %d %s, want 200 approved %s", r.Status, r.Body, id)
		}
		if st, b := statusOf(t, c, 1, id); st != "approved" || b["attempts"] != 2.0 {
			t.Fatalf("after the right guess: %v, want approved after 2 attempts", b)
		}
		r = c.do(t, 0, "POST", "/otp/verifications/"+id+"/cancel", "")
		if r.Status != 409 || r.json(t)["code"] != "verification_not_pending" || r.json(t)["verification_status"] != "approved" {
			t.Fatalf("cancel approved: %d %s, want 409 verification_not_pending approved", r.Status, r.Body)
		}
	})

	t.Run("a new send supersedes: the old one is canceled, its code dead", func(t *testing.T) {
		old := sendID(t, c, 0, phone)
		oldCode := c.out.LastCode(t, phone)
		fresh := sendID(t, c, 1, phone)
		if st, _ := statusOf(t, c, 0, old); st != "canceled" {
			t.Fatalf("superseded: %s, want canceled", st)
		}
		if st, _ := statusOf(t, c, 0, fresh); st != "pending" {
			t.Fatalf("new: %s, want pending", st)
		}
		if c.out.LastCode(t, phone) != oldCode {
			if r := verify(t, c, 0, oldCode); r.Status != 400 {
				t.Fatalf("old code: %d %s, want 400", r.Status, r.Body)
			}
		}
	})

	t.Run("canceled: the code is dead", func(t *testing.T) {
		id := sendID(t, c, 0, phone)
		code := c.out.LastCode(t, phone)
		r := c.do(t, 1, "POST", "/otp/verifications/"+id+"/cancel", "")
		if r.Status != 200 || r.json(t)["status"] != "canceled" {
			t.Fatalf("cancel: %d %s, want 200 canceled", r.Status, r.Body)
		}
		if r := verify(t, c, 0, code); r.Status != 400 || r.json(t)["code"] != "no_active_code" {
			t.Fatalf("verify after cancel: %d %s, want 400 no_active_code", r.Status, r.Body)
		}
		if st, _ := statusOf(t, c, 0, id); st != "canceled" {
			t.Fatalf("after cancel: %s", st)
		}
	})

	t.Run("max_attempts_reached at the last wrong guess", func(t *testing.T) {
		id := sendID(t, c, 0, phone)
		code := c.out.LastCode(t, phone)
		for i := range 2 {
			verify(t, c, i, wrong(code))
			if st, _ := statusOf(t, c, 0, id); st != "pending" {
				t.Fatalf("after %d wrong guesses: %s, want pending", i+1, st)
			}
		}
		verify(t, c, 0, wrong(code))
		if st, b := statusOf(t, c, 1, id); st != "max_attempts_reached" || b["attempts"] != 3.0 {
			t.Fatalf("after 3 wrong guesses: %v", b)
		}
		if r := verify(t, c, 1, code); r.Status != 429 {
			t.Fatalf("right code after the lock: %d %s, want 429", r.Status, r.Body)
		}
		if st, _ := statusOf(t, c, 1, id); st != "max_attempts_reached" {
			t.Fatalf("after a refused guess: %s", st)
		}
	})

	t.Run("concurrent right guesses: one approval", func(t *testing.T) {
		for round := range 5 {
			id := sendID(t, c, 0, phone)
			code := c.out.LastCode(t, phone)
			statuses := burst(t, c, 20, "/otp/verify", func(int) string { return verifyBody(code) })
			if statuses[200] != 1 {
				t.Fatalf("round %d: %v, want exactly one 200", round, statuses)
			}
			if st, _ := statusOf(t, c, 1, id); st != "approved" {
				t.Fatalf("round %d: %s, want approved", round, st)
			}
		}
	})

	t.Run("cancel racing verify: approved or canceled, never both", func(t *testing.T) {
		counts := map[string]int{}
		for round := range 20 {
			id := sendID(t, c, 0, phone)
			code := c.out.LastCode(t, phone)
			var v, x response
			var wg sync.WaitGroup
			wg.Go(func() { v = verify(t, c, round, code) })
			wg.Go(func() { x = c.do(t, round+1, "POST", "/otp/verifications/"+id+"/cancel", "") })
			wg.Wait()
			st, _ := statusOf(t, c, 0, id)
			switch {
			case v.Status == 200 && x.Status == 409 && st == "approved" && x.json(t)["verification_status"] == "approved":
			case v.Status == 400 && x.Status == 200 && st == "canceled":
			default:
				t.Fatalf("round %d: verify %d %s, cancel %d %s, status %s", round, v.Status, v.Body, x.Status, x.Body, st)
			}
			counts[st]++
			if r := verify(t, c, round, code); r.Status != 400 || r.json(t)["code"] != "no_active_code" {
				t.Fatalf("round %d: the code lived on: %d %s", round, r.Status, r.Body)
			}
		}
		t.Logf("outcomes: %v", counts)
	})
}

// TestVerificationExpires: pending turns expired when the code's TTL runs
// out, and the record stays for its retention, then 404.
func TestVerificationExpires(t *testing.T) {
	p := defaults()
	p.OTP.CodeTTL = time.Minute
	c, m := miniCluster(t, 1, p)
	id := sendID(t, c, 0, phone)
	_, b := statusOf(t, c, 0, id)
	created, _ := time.Parse(time.RFC3339, b["created_at"].(string))
	expires, _ := time.Parse(time.RFC3339, b["expires_at"].(string))
	if expires.Sub(created) != time.Minute {
		t.Errorf("expires_at - created_at = %v, want the code TTL 1m (%v)", expires.Sub(created), b)
	}
	m.FastForward(61 * time.Second)
	if st, _ := statusOf(t, c, 0, id); st != "expired" {
		t.Fatalf("after the TTL: %s, want expired", st)
	}
	if r := c.do(t, 0, "POST", "/otp/verifications/"+id+"/cancel", ""); r.Status != 409 || r.json(t)["verification_status"] != "expired" {
		t.Fatalf("cancel expired: %d %s, want 409 expired", r.Status, r.Body)
	}
	m.FastForward(24 * time.Hour)
	if r := c.do(t, 0, "GET", "/otp/verifications/"+id, ""); r.Status != 404 || r.json(t)["code"] != "verification_not_found" {
		t.Fatalf("after the retention: %d %s, want 404", r.Status, r.Body)
	}
}

// TestVerificationsAreNotCached: a verification's answers name the full
// number, so no browser or proxy may keep them.
func TestVerificationsAreNotCached(t *testing.T) {
	c, _ := miniCluster(t, 1, defaults())
	id := sendID(t, c, 0, phone)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/otp/verifications/" + id},
		{"GET", "/otp/verifications/unknown"},
		{"POST", "/otp/verifications/" + id + "/cancel"},
	} {
		r := c.do(t, 0, tc.method, tc.path, "")
		if got := r.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s: %d, Cache-Control = %q, want no-store", tc.method, tc.path, r.Status, got)
		}
	}
}
