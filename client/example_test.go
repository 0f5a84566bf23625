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
	"time"

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
	// The ops overrides, with otpguard's Idempotency-Key replay; the first
	// answer is lost on the way back, as on a flaky network.
	var overrides []map[string]any
	byKey := map[string]map[string]any{}
	mux.HandleFunc("POST /ops/overrides", func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		o, seen := byKey[key]
		if !seen {
			o = map[string]any{"id": len(overrides) + 1, "kind": req["kind"], "subject": req["subject"], "limit": req["limit"],
				"reason": req["reason"], "author": "ops:1f2e3d4c", "created_at": "2026-12-03T09:00:00Z",
				"expires_at": "2026-12-03T15:00:00Z", "expires_in_seconds": req["expires_in"]}
			overrides, byKey[key] = append(overrides, o), o
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close() // done, but the answer never arrives
				return
			}
		}
		w.Header().Set("Idempotent-Replayed", "true")
		reply(w, 201, o)
	})
	mux.HandleFunc("GET /ops/overrides", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		reply(w, 200, map[string]any{"overrides": overrides})
	})
	mux.HandleFunc("GET /ops/abuse", func(w http.ResponseWriter, r *http.Request) {
		budget := map[string]any{"enabled": true, "used": 412, "limit": 500, "remaining": 88, "exhausted": false, "resets_in_seconds": 1260}
		window := map[string]any{"since": "2026-12-03T08:00:00Z", "total": map[string]any{"sends": 412, "refusals": 97, "verifications": 31, "conversion_rate": 0.075},
			"countries": []any{map[string]any{"country": "NG", "calling_code": "234", "sends": 380, "refusals": 90, "verifications": 12,
				"conversion_rate": 0.032, "limits": []any{map[string]any{"rule": "per_country", "limit": 400, "window_seconds": 3600}}}},
			"countries_total": 1, "prefixes": []any{}, "prefixes_total": 0}
		reply(w, 200, map[string]any{"at": "2026-12-03T09:39:00Z",
			"state":  map[string]any{"status": "ok", "redis": "up", "breaker": "closed", "instances": 3, "in_fallback": []any{}, "shed": 0, "store_shed": 0, "store_late": 0},
			"budget": map[string]any{"hour": budget, "day": budget}, "last_hour": window, "last_day": window,
			"alerts": []any{map[string]any{"rule": "conversion", "scope": "prefix", "subject": "+23480", "country": "NG", "outcome": "blocked",
				"at": "2026-12-03T09:30:00Z", "until": "2026-12-03T10:30:00Z", "seconds_left": 3060, "detail": "3 % of 300 sends verified"}},
			"auto_blocks": []any{}, "blocks": map[string]any{"total": 0, "first": []any{}}})
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

func ExampleClient_AddOverride() {
	srv := exampleServer()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithOpsKey("ogo_..."))
	ctx := context.Background()

	// A pumping wave on one prefix: at most 10 sends an hour there for the
	// next 6 hours. The call carries a fresh Idempotency-Key, so when its
	// answer is lost it is asked again and still makes one override.
	o, err := c.AddOverride(ctx, client.OverrideRequest{Kind: client.OverridePrefixLimit, Subject: "+23480",
		Limit: 10, ExpiresIn: 6 * time.Hour, Reason: "pumping wave, ticket 4411"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.ID, o.Kind, o.Subject, *o.Limit, o.ExpiresInSeconds)

	list, err := c.Overrides(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(list), "override in force")
	// Output:
	// 1 prefix_limit +23480 10 21600
	// 1 override in force
}

func ExampleClient_Abuse() {
	srv := exampleServer()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithOpsKey("ogo_..."))

	v, err := c.Abuse(context.Background(), 5)
	if err != nil {
		log.Fatal(err)
	}
	b := v.Budget.Hour
	fmt.Printf("budget: %d of %d this hour\n", b.Used, b.Limit)
	for _, ct := range v.LastHour.Countries {
		fmt.Printf("%s: %d sends, %.1f %% verified\n", ct.Country, ct.Sends, 100**ct.ConversionRate)
	}
	for _, a := range v.Alerts {
		fmt.Println(a.Rule, a.Subject, a.Outcome)
	}
	// Output:
	// budget: 412 of 500 this hour
	// NG: 380 sends, 3.2 % verified
	// conversion +23480 blocked
}
