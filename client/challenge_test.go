package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/guard"
)

// TestChallengeRoundTrip: a 428 carries the challenge; SolvePoW's answer,
// resent in SendRequest.Challenge, is one the server's verifier accepts.
func TestChallengeRoundTrip(t *testing.T) {
	pow := challenge.NewPoW([]byte("0123456789abcdef0123456789abcdef"), 5000, time.Minute)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Phone, Challenge string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Challenge != "" {
			if _, err := pow.Check(r.Context(), req.Phone, req.Challenge, "", time.Now()); err != nil {
				t.Errorf("the server refused the client's solution: %v", err)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"status":"pending","phone":"+447400100001","expires_in":300}`))
			return
		}
		c, _ := pow.Issue(req.Phone, time.Now())
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusPreconditionRequired)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:otpguard:problem:challenge_required", "title": "Precondition Required",
			"status": 428, "detail": "solve it", "code": "challenge_required",
			"challenge": map[string]any{"type": string(c.Type), "algorithm": c.Algorithm, "challenge": c.Challenge,
				"salt": c.Salt, "maxnumber": c.MaxNumber, "signature": c.Signature}})
	}))
	defer srv.Close()
	cl, err := client.New(srv.URL, client.WithAPIKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = cl.Send(ctx, client.SendRequest{Phone: "+447400100001"})
	ch, ok := client.ChallengeOf(err)
	if !ok || ch.Type != string(guard.ChallengePoW) {
		t.Fatalf("got %v, want a challenge_required with a pow challenge", err)
	}
	sol, err := ch.SolvePoW()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Send(ctx, client.SendRequest{Phone: "+447400100001", Challenge: sol}); err != nil {
		t.Fatalf("resend with the solution: %v", err)
	}
}
