package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client"
)

func TestOverridesAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	c := newClient(t, g.URL)
	ctx := context.Background()

	req := client.OverrideRequest{Kind: client.OverridePrefixLimit, Subject: "+91981", Limit: 1, ExpiresIn: time.Hour,
		Reason: "pumping wave", IdempotencyKey: "ticket-4411"}
	o, err := c.AddOverride(ctx, req)
	if err != nil || o.ID == 0 || o.Kind != client.OverridePrefixLimit || o.Subject != "+91981" || o.Limit == nil || *o.Limit != 1 ||
		o.Reason != "pumping wave" || o.Author == "" || o.ExpiresInSeconds != 3600 || o.ExpiresAt.Sub(o.CreatedAt).Round(time.Second) != time.Hour {
		t.Fatalf("AddOverride = %+v, %v; want the prefix limit of 1 for an hour", o, err)
	}
	// The same key and request: the first answer, and no second override.
	again, err := c.AddOverride(ctx, req)
	if err != nil || again.ID != o.ID {
		t.Fatalf("AddOverride again = %+v, %v; want override %d again", again, err, o.ID)
	}
	other := req
	other.Limit = 2
	var e *client.Error
	if _, err := c.AddOverride(ctx, other); !errors.As(err, &e) || e.Status != 422 || e.Code != client.CodeIdempotencyKeyReused {
		t.Errorf("same key, another limit: %v, want 422 idempotency_key_reused", err)
	}
	list, err := c.Overrides(ctx)
	if err != nil || len(list) != 1 || list[0].ID != o.ID {
		t.Fatalf("Overrides = %+v, %v; want the one override", list, err)
	}

	// Enforced at once on this instance: one send under the prefix.
	if _, err := c.Send(ctx, client.SendRequest{Phone: "+919811100001"}); err != nil {
		t.Fatalf("first send under the prefix: %v", err)
	}
	if _, err := c.Send(ctx, client.SendRequest{Phone: "+919811100002"}); !errors.As(err, &e) || e.Status != 429 {
		t.Errorf("second send under the prefix: %v, want a 429", err)
	}

	// A refused field is named.
	_, err = c.AddOverride(ctx, client.OverrideRequest{Kind: client.OverrideCountryPause, Subject: "NG", Limit: 3, Reason: "x"})
	if !errors.As(err, &e) || e.Status != 400 || e.Code != client.CodeInvalidRequest || e.Field != "limit" {
		t.Errorf("a pause with a limit: %#v, want 400 invalid_request naming limit", err)
	}

	if err := c.RemoveOverride(ctx, o.ID); err != nil {
		t.Fatalf("RemoveOverride: %v", err)
	}
	if err := c.RemoveOverride(ctx, o.ID); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("RemoveOverride again: %v, want not_found", err)
	}
	if list, err := c.Overrides(ctx); err != nil || len(list) != 0 {
		t.Errorf("Overrides after removal = %+v, %v; want none", list, err)
	}
}

func TestDenyIdempotentAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	c := newClient(t, g.URL)
	ctx := context.Background()
	req := client.DenyRequest{Pattern: "+91981110", Reason: "pumping", ExpiresIn: time.Hour, IdempotencyKey: "ticket-4412"}
	first, err := c.Deny(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Deny(ctx, req)
	if err != nil || again.ID != first.ID {
		t.Fatalf("Deny again = %+v, %v; want entry %d again", again, err, first.ID)
	}
	req.Pattern = "+91981111"
	if _, err := c.Deny(ctx, req); !client.IsCode(err, client.CodeIdempotencyKeyReused) {
		t.Errorf("same key, another pattern: %v, want idempotency_key_reused", err)
	}
	// Without a key of the caller's, each call is its own: a second entry.
	req.IdempotencyKey = ""
	if _, err := c.Deny(ctx, req); err != nil {
		t.Fatal(err)
	}
	if list, err := c.DenyList(ctx); err != nil || len(list) != 2 {
		t.Errorf("DenyList = %+v, %v; want 2 entries", list, err)
	}
}

// answerLost is a proxy to target that loses the answer of the first
// request to each path: otpguard ran it, the client sees the connection
// cut. It counts the requests that reached it.
func answerLost(t *testing.T, target string) (string, *atomic.Int64) {
	var hits atomic.Int64
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		out.Header = r.Header.Clone()
		res, err := http.DefaultClient.Do(out)
		if err != nil {
			t.Error(err)
			return
		}
		defer res.Body.Close()
		answer, _ := io.ReadAll(res.Body)
		mu.Lock()
		lose := !seen[r.URL.Path]
		seen[r.URL.Path] = true
		mu.Unlock()
		if lose {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &hits
}

// TestOpsWritesRetriedAgainstOTPGuard: a Deny or AddOverride whose answer
// is lost is asked again with the same generated Idempotency-Key, and
// otpguard answers it with the first answer: one entry, one override.
func TestOpsWritesRetriedAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	url, hits := answerLost(t, g.URL)
	c := newClient(t, url, client.WithRetries(2, time.Millisecond))
	direct := newClient(t, g.URL)
	ctx := context.Background()

	entry, err := c.Deny(ctx, client.DenyRequest{Pattern: "+91981110", Reason: "pumping"})
	if err != nil || entry.Pattern != "+91981110" {
		t.Fatalf("Deny = %+v, %v; want the entry after a retry", entry, err)
	}
	if list, err := direct.DenyList(ctx); err != nil || len(list) != 1 || list[0].ID != entry.ID {
		t.Errorf("DenyList = %+v, %v; want entry %d alone", list, err, entry.ID)
	}

	o, err := c.AddOverride(ctx, client.OverrideRequest{Kind: client.OverrideBudgetHour, Limit: 100, Reason: "wave"})
	if err != nil || o.Kind != client.OverrideBudgetHour {
		t.Fatalf("AddOverride = %+v, %v; want the override after a retry", o, err)
	}
	if list, err := direct.Overrides(ctx); err != nil || len(list) != 1 || list[0].ID != o.ID {
		t.Errorf("Overrides = %+v, %v; want override %d alone", list, err, o.ID)
	}
	if n := hits.Load(); n != 4 {
		t.Errorf("requests through the proxy: %d, want 4 (each call twice)", n)
	}
}

func TestAbuseAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	c := newClient(t, g.URL)
	ctx := context.Background()
	if _, err := c.Send(ctx, client.SendRequest{Phone: phone}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, client.SendRequest{Phone: phone}); !client.IsCode(err, client.CodeCooldown) {
		t.Fatalf("second send: %v, want cooldown", err)
	}
	// The figures reach Redis off the request path: read until they are there.
	var v *client.AbuseView
	for try := 0; try < 200; try++ {
		var err error
		if v, err = c.Abuse(ctx, 5); err != nil {
			t.Fatalf("Abuse: %v", err)
		}
		if v.LastHour.Total.Sends >= 1 && v.LastHour.Total.Refusals >= 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	h := v.LastHour
	if h.Total.Sends != 1 || h.Total.Refusals != 1 || h.Total.RefusalsByCode["cooldown"] != 1 || h.Since.IsZero() {
		t.Errorf("last hour total = %+v since %v; want 1 send and 1 cooldown refusal", h.Total, h.Since)
	}
	if len(h.Countries) != 1 || h.Countries[0].Country != "IN" || h.Countries[0].Sends != 1 || h.CountriesTotal != 1 {
		t.Errorf("last hour countries = %+v (total %d); want IN with 1 send", h.Countries, h.CountriesTotal)
	}
	if v.State.Redis != "up" || v.State.Instances < 1 || v.At.IsZero() || v.LastDay.Total.Sends != 1 {
		t.Errorf("state %+v at %v, last day %+v; want redis up and the send counted", v.State, v.At, v.LastDay.Total)
	}
	if v.Blocks.Total != 1 || len(v.Blocks.First) != 1 || v.Blocks.First[0].Phone != phone {
		t.Errorf("blocks = %+v; want the number in its cooldown", v.Blocks)
	}
	if _, err := c.Abuse(ctx, 51); !client.IsCode(err, client.CodeInvalidRequest) {
		t.Errorf("Abuse(top 51): %v, want invalid_request", err)
	}
}
