package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/otpguard/otpguard/client"
)

// exampleServer stands in for a running otpguard in the examples, with
// canned answers in otpguard's format (the tests run the same calls
// against a real one).
func exampleServer() *httptest.Server {
	var mu sync.Mutex
	sent, checks := map[string]bool{}, map[string]int{}
	reply := func(w http.ResponseWriter, status int, v any) {
		ct := "application/json"
		if status >= 400 && status != 429 || status == 429 && v.(map[string]any)["code"] != nil {
			ct = "application/problem+json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /otp/send", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Phone string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		defer mu.Unlock()
		if sent[req.Phone] {
			w.Header().Set("Retry-After", "30")
			reply(w, 429, map[string]any{"type": "urn:otpguard:problem:cooldown", "title": "Too Many Requests", "status": 429,
				"detail": "a code was sent to this number moments ago", "code": "cooldown", "retry_after": 30})
			return
		}
		sent[req.Phone] = true
		reply(w, 200, map[string]any{"status": "pending", "phone": req.Phone, "expires_in": 300, "verification_id": "ver_1"})
	})
	mux.HandleFunc("POST /otp/verify", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Phone, Code string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Code != "408773" {
			reply(w, 400, map[string]any{"type": "urn:otpguard:problem:wrong_code", "title": "Bad Request", "status": 400,
				"detail": "the code is wrong", "code": "wrong_code", "attempts_left": 4})
			return
		}
		reply(w, 200, map[string]any{"valid": true, "phone": req.Phone, "verification_id": "ver_1", "status": "approved"})
	})
	mux.HandleFunc("POST /limits/check", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Checks []struct{ Policy, Key string }
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		defer mu.Unlock()
		allowed, status := true, 200
		var decisions []map[string]any
		for _, ch := range req.Checks {
			checks[ch.Key]++
			ok := checks[ch.Key] <= 2
			rem, retry := int64(2-checks[ch.Key]), int64(0)
			if !ok {
				rem, retry, allowed = 0, 60_000, false
			}
			decisions = append(decisions, map[string]any{"policy": ch.Policy, "key": ch.Key, "mode": "exact",
				"allowed": ok, "limit": 2, "remaining": rem, "retry_after_ms": retry, "reset_after_ms": 60_000})
		}
		d := decisions[0]
		w.Header().Set("RateLimit-Policy", fmt.Sprintf("%q;q=2;w=60", d["policy"]))
		w.Header().Set("RateLimit", fmt.Sprintf("%q;r=%d;t=60", d["policy"], d["remaining"]))
		if !allowed {
			status = 429
			w.Header().Set("Retry-After", "60")
		}
		reply(w, status, map[string]any{"allowed": allowed, "decisions": decisions})
	})
	return httptest.NewServer(mux)
}

func Example() {
	srv := exampleServer() // a running otpguard
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAPIKey("ogk_..."))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	sent, err := c.Send(ctx, client.SendRequest{Phone: "+919800000000", ClientIP: "203.0.113.7"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sent.Status, sent.Phone, sent.VerificationID)

	_, err = c.Verify(ctx, client.VerifyRequest{Phone: "+919800000000", Code: "000000"})
	var e *client.Error
	if errors.As(err, &e) && e.Code == client.CodeWrongCode {
		fmt.Println("wrong code, attempts left:", *e.AttemptsLeft)
	}

	ok, err := c.Verify(ctx, client.VerifyRequest{Phone: "+919800000000", Code: "408773"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ok.Status)
	// Output:
	// pending +919800000000 ver_1
	// wrong code, attempts left: 4
	// approved
}

func ExampleIsCode() {
	srv := exampleServer()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithAPIKey("ogk_..."))
	ctx := context.Background()

	_, _ = c.Send(ctx, client.SendRequest{Phone: "+919800000000"})
	_, err := c.Send(ctx, client.SendRequest{Phone: "+919800000000"})
	if client.IsCode(err, client.CodeCooldown) {
		wait, _ := client.RetryAfter(err)
		fmt.Println("a code was just sent; ask again in", wait)
	}
	fmt.Println(err)
	// Output:
	// a code was just sent; ask again in 30s
	// otpguard: 429 cooldown: a code was sent to this number moments ago (retry after 30s)
}

func ExampleClient_Check() {
	srv := exampleServer()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithAPIKey("ogk_..."))
	ctx := context.Background()

	// A limit of 2 a minute: the third is denied by otpguard, and the
	// fourth by the client's memory of that denial, with no request.
	for range 4 {
		res, err := c.Check(ctx, client.Check{Policy: "search", Key: "user:42"})
		if err != nil {
			log.Fatal(err) // otpguard gave no decision
		}
		d := res.Decisions[0]
		fmt.Printf("allowed=%v mode=%s remaining=%d retry=%v\n", res.Allowed, d.Mode, d.Remaining, res.RetryAfter.Round(1e9))
	}
	// Output:
	// allowed=true mode=exact remaining=1 retry=0s
	// allowed=true mode=exact remaining=0 retry=0s
	// allowed=false mode=exact remaining=0 retry=1m0s
	// allowed=false mode=client_memory remaining=0 retry=1m0s
}

func ExampleClient_CheckBatch() {
	srv := exampleServer()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithAPIKey("ogk_..."))

	// Several checks, one round trip; allowed only if all allow.
	res, err := c.CheckBatch(context.Background(),
		client.Check{Policy: "api", Key: "user:42"},
		client.Check{Policy: "api", Key: "ip:203.0.113.7", Cost: 5})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed, res.RateLimitPolicy)
	// Output:
	// true "api";q=2;w=60
}
