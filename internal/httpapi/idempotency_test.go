package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// doWith sends a request to instance i with key (none when "") and the
// headers hdr.
func (c *cluster) doWith(t testing.TB, i int, method, path, body, key string, hdr map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, c.instances[i%len(c.instances)].srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// post sends a request with the API key and hdr, for a goroutine that
// does not read the answer.
func post(url, body string, hdr map[string]string) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if res, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, res.Body) // only the request's effect is looked at
		res.Body.Close()
	}
}

// claimCounter counts the Idempotency-Key claims an instance sends to
// Redis, alone or in a coalesced pipeline.
type claimCounter struct{ n *atomic.Int64 }

func (h claimCounter) count(cmd redis.Cmder) {
	a := cmd.Args()
	// EVALSHA sha 1 key body token pending: the claim (finish has 7 too,
	// but runs only after the first answer).
	if len(a) == 7 && strings.HasPrefix(strings.ToLower(fmt.Sprint(a[0])), "eval") &&
		strings.Contains(fmt.Sprint(a[3]), "idem:") {
		h.n.Add(1)
	}
}

func (h claimCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h claimCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}
func (h claimCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

// TestIdempotentSendAcrossInstances: 50 concurrent retries of one send with
// one Idempotency-Key, over 3 instances on one real Redis, while the first
// is held at the provider: exactly one SMS leaves, and all 50 get the
// first answer (49 of them replayed). The key with another body is 422; a
// new key is a new request (and meets the cooldown).
func TestIdempotentSendAcrossInstances(t *testing.T) {
	t.Parallel()
	c := realCluster(t, 3, defaults())
	claims := &atomic.Int64{}
	for _, in := range c.instances {
		in.rdb.AddHook(claimCounter{claims})
	}
	c.out.Hold, c.out.Held = make(chan struct{}), make(chan struct{}, 1)
	const n = 50
	body := `{"phone":"+14155550120","client_ip":"203.0.113.9"}`
	key := map[string]string{"Idempotency-Key": "order-7f3a/attempt"}
	res := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i] = c.doWith(t, i, "POST", "/otp/send", body, apiKey, key) })
	}
	<-c.out.Held
	// Every request has tried its claim once (49 found it pending) before
	// the first may answer.
	for deadline := time.Now().Add(time.Minute); claims.Load() < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	close(c.out.Hold)
	wg.Wait()
	if claims.Load() < n {
		t.Fatalf("only %d of %d requests reached their claim while the first was held", claims.Load(), n)
	}

	if got := c.out.Count(); got != 1 {
		t.Errorf("SMS sent: %d, want 1", got)
	}
	first, replayed := 0, 0
	for i, r := range res {
		if r.Status != 200 || !bytes.Equal(r.Body, res[0].Body) {
			t.Errorf("request %d: %d %s, want the first answer 200 %s", i, r.Status, r.Body, res[0].Body)
		}
		if r.Header.Get("Idempotent-Replayed") == "true" {
			replayed++
		} else {
			first++
		}
	}
	if first != 1 || replayed != n-1 {
		t.Errorf("%d first answers and %d replays, want 1 and %d", first, replayed, n-1)
	}
	if id := res[0].json(t)["verification_id"]; id == nil {
		t.Errorf("answer %s has no verification_id", res[0].Body)
	}

	r := c.doWith(t, 1, "POST", "/otp/send", `{"phone":"+14155550121"}`, apiKey, key)
	if r.Status != 422 || r.json(t)["code"] != "idempotency_key_reused" {
		t.Errorf("same key, another body: %d %s, want 422 idempotency_key_reused", r.Status, r.Body)
	}
	r = c.doWith(t, 2, "POST", "/otp/send", body, apiKey, map[string]string{"Idempotency-Key": "another"})
	if r.Status != 429 || r.json(t)["code"] != "cooldown" || r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a new key: %d %s, want a fresh 429 cooldown", r.Status, r.Body)
	}
	if got := c.out.Count(); got != 1 {
		t.Errorf("SMS sent: %d, want still 1", got)
	}
	// The 49 duplicates counted their limits with their claim (one MULTI)
	// and gave them back: the address's window (20 an hour) holds the two
	// sends above, so another number from it goes.
	r = c.doWith(t, 0, "POST", "/otp/send", `{"phone":"+14155550126","client_ip":"203.0.113.9"}`, apiKey, nil)
	if r.Status != 200 {
		t.Errorf("another number from the same address: %d %s, want 200 (the duplicates' counts given back)", r.Status, r.Body)
	}
}

// TestIdempotencyNotKept: an answer that says "try again" (a 5xx, a 429)
// is not kept: the same key runs afresh.
func TestIdempotencyNotKept(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	c, _ := miniCluster(t, 2, p)
	key := map[string]string{"Idempotency-Key": "k"}
	body := `{"phone":"+14155550122"}`
	c.out.SetFail(fmt.Errorf("provider down"))
	if r := c.doWith(t, 0, "POST", "/otp/send", body, apiKey, key); r.Status != 502 {
		t.Fatalf("provider down: %d %s, want 502", r.Status, r.Body)
	}
	c.out.SetFail(nil)
	if r := c.doWith(t, 1, "POST", "/otp/send", body, apiKey, key); r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after a 502: %d %s, want a fresh 200", r.Status, r.Body)
	}
	if r := c.doWith(t, 0, "POST", "/otp/send", body, apiKey, key); r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after the 200: %d %s, want it replayed", r.Status, r.Body)
	}
	if got := c.out.Count(); got != 1 {
		t.Errorf("SMS sent: %d, want 1", got)
	}
	for _, k := range []string{"", "clé", "a\tb", strings.Repeat("x", 256)} {
		req, _ := http.NewRequest("POST", c.instances[0].srv.URL+"/otp/send", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header["Idempotency-Key"] = []string{k}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 400 {
			t.Errorf("Idempotency-Key %q: %d, want 400", k, res.StatusCode)
		}
	}
}

// TestIdempotentRefusalsLastNoLongerThanTheirCause: a refusal whose cause
// can end (a deny entry that expires, a pause, a policy) is not kept, so
// the same key after the entry expired runs afresh and sends; a malformed
// request (400) is not kept; other 4xx are kept, at most
// IdempotencyKept4xxPerHour per caller, the rest not.
func TestIdempotentRefusalsLastNoLongerThanTheirCause(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	until := time.Now().Add(1500 * time.Millisecond)
	if _, err := oc.nodes[0].desk.AddDeny(context.Background(), guard.DenyEntry{Pattern: "+1415555", ExpiresAt: &until, Reason: "wave"}, "ops:test"); err != nil {
		t.Fatal(err)
	}
	opsWait(t, "the deny-list to load", func() bool { return len(oc.nodes[0].deny.Entries()) == 1 })
	key := map[string]string{"Idempotency-Key": "order-1"}
	body := `{"phone":"+14155550123"}`
	if r := oc.doWith(t, 0, "POST", "/otp/send", body, apiKey, key); r.Status != 403 || r.json(t)["code"] != "denied" {
		t.Fatalf("send to a denied number: %d %s, want 403 denied", r.Status, r.Body)
	}
	time.Sleep(time.Until(until) + 100*time.Millisecond)
	if r := oc.doWith(t, 0, "POST", "/otp/send", body, apiKey, key); r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("same key after the deny entry expired: %d %s (replayed %q), want a fresh 200", r.Status, r.Body, r.Header.Get("Idempotent-Replayed"))
	}

	bad := map[string]string{"Idempotency-Key": "malformed"}
	for i := range 2 {
		if r := oc.doWith(t, 0, "POST", "/otp/send", `{"phone":`, apiKey, bad); r.Status != 400 || r.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("malformed request %d: %d (replayed %q), want a fresh 400", i+1, r.Status, r.Header.Get("Idempotent-Replayed"))
		}
	}

	invalid := `{"phone":"+999"}`
	first := oc.doWith(t, 0, "POST", "/otp/send", invalid, apiKey, map[string]string{"Idempotency-Key": "inv-0"})
	if first.Status != 422 {
		t.Fatalf("invalid destination: %d %s, want 422", first.Status, first.Body)
	}
	for i := 1; i <= httpapi.IdempotencyKept4xxPerHour; i++ {
		oc.doWith(t, 0, "POST", "/otp/send", invalid, apiKey, map[string]string{"Idempotency-Key": fmt.Sprintf("inv-%d", i)})
	}
	if r := oc.doWith(t, 0, "POST", "/otp/send", invalid, apiKey, map[string]string{"Idempotency-Key": "inv-0"}); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the first 422 again: %d (replayed %q), want it replayed", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	last := fmt.Sprintf("inv-%d", httpapi.IdempotencyKept4xxPerHour)
	if r := oc.doWith(t, 0, "POST", "/otp/send", invalid, apiKey, map[string]string{"Idempotency-Key": last}); r.Status != 422 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the 422 past the cap again: %d (replayed %q), want a fresh 422", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
}

// TestIdempotentDuplicateRunsAfterRelease: a duplicate that found the key
// held (its claim rode in its send's MULTI, which then gave its counts
// back) waits; when the holder's answer is not kept (a 502: released) it
// claims the key and runs the send itself, reading its own body again.
func TestIdempotentDuplicateRunsAfterRelease(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	c, _ := miniCluster(t, 2, p)
	claims := &atomic.Int64{}
	c.instances[1].rdb.AddHook(claimCounter{claims})
	c.out.Hold, c.out.Held = make(chan struct{}), make(chan struct{}, 1)
	c.out.SetFail(fmt.Errorf("provider down"))
	key := map[string]string{"Idempotency-Key": "dup"}
	body := `{"phone":"+14155550127","client_ip":"203.0.113.11"}`
	first, second := make(chan response, 1), make(chan response, 1)
	go func() { first <- c.doWith(t, 0, "POST", "/otp/send", body, apiKey, key) }()
	<-c.out.Held
	go func() { second <- c.doWith(t, 1, "POST", "/otp/send", body, apiKey, key) }()
	// The duplicate's claim in its send, then at least one poll.
	for deadline := time.Now().Add(time.Minute); claims.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if claims.Load() < 2 {
		t.Fatalf("the duplicate made %d claims, want its send's and a poll", claims.Load())
	}
	close(c.out.Hold)
	if r := <-first; r.Status != 502 {
		t.Fatalf("the holder: %d %s, want 502", r.Status, r.Body)
	}
	if r := <-second; r.Status != 502 && r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the duplicate after the release: %d %s, want its own run (200, or 502 while the provider fails)", r.Status, r.Body)
	}
}
