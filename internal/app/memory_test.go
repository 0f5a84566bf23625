package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// maxRecordBytes is far above what each record costs (a few hundred bytes,
// docs/otp.md, "Idempotent sends" and "Verifications"): it fails only
// when a record balloons, e.g. an answer stored with every header.
const maxRecordBytes = 2048

// TestRecordMemory measures, with MEMORY USAGE, the Redis memory of the
// records one keyed OTP send leaves for 24 h: the idempotency record (the
// stored answer) and the verification (its record and the id's map to the
// number), written by the whole service as the binary builds it (app.New,
// the real handler, a send's real answer), so docs/otp.md's figures are
// these records' and not a guess at their contents. A private
// redis-server: production key names (og:, no test prefix to inflate
// them), and a keyspace holding only this send's keys. It logs every key:
//
//	go test -count=1 -v -run TestRecordMemory ./internal/app/
func TestRecordMemory(t *testing.T) {
	srv := redistest.Start(t)
	env := map[string]string{
		"OTPGUARD_REDIS_URL": srv.URL(), "OTPGUARD_API_KEYS": sendBenchKey,
		"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_DATA_DIR": t.TempDir(),
		"OTPGUARD_LOG_LEVEL": "warn", "OTPGUARD_REDIS_TIMEOUT": "1s",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard), app.WithSender(guardtest.Sender{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })

	const phone = "+919800000000"
	req := httptest.NewRequest(http.MethodPost, "/otp/send", strings.NewReader(`{"phone":"`+phone+`","client_ip":"203.0.113.7"}`))
	req.Header.Set("Authorization", "Bearer "+sendBenchKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "6f1c7a52-3d1e-4b8e-9a57-0f3c2e4d5b61") // a UUID, as most clients send
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("send: got %d %s, want 200", w.Code, w.Body)
	}
	var sent struct {
		VerificationID string `json:"verification_id"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &sent); err != nil || sent.VerificationID == "" {
		t.Fatalf("send answered %s: no verification_id (%v)", w.Body, err)
	}
	if err := a.FlushWatch(context.Background()); err != nil { // its keys are logged too
		t.Fatal(err)
	}

	usage := keyMemory(t, srv.URL())
	records := []struct {
		name string
		key  *regexp.Regexp
	}{
		{"idempotency record (a send's 200)", regexp.MustCompile(`^og:idem:\{[^{}]+\}:r$`)},
		{"verification record", regexp.MustCompile(`^og:otp:\{` + regexp.QuoteMeta(phone) + `\}:ver:` + sent.VerificationID + `$`)},
		{"verification id -> number", regexp.MustCompile(`^og:ver:\{` + sent.VerificationID + `\}:p$`)},
	}
	for _, r := range records {
		var found []string
		for k := range usage {
			if r.key.MatchString(k) {
				found = append(found, k)
			}
		}
		if len(found) != 1 {
			t.Errorf("%s: got keys %v matching %s, want one", r.name, found, r.key)
			continue
		}
		n := usage[found[0]]
		t.Logf("%s: %d bytes (%s)", r.name, n, found[0])
		if n > maxRecordBytes {
			t.Errorf("%s: got %d bytes of Redis memory, want at most %d", r.name, n, maxRecordBytes)
		}
	}
}

// keyMemory is MEMORY USAGE (SAMPLES 0: every element counted) of every
// key of the private server at url, each logged.
func keyMemory(t *testing.T, url string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	rdb := redistest.Client(t, url)
	var keys []string
	iter := rdb.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	usage := map[string]int64{}
	for _, k := range keys {
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", k, err)
		}
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		usage[k] = n
		t.Logf("%6d B  %-6s %s", n, typ, k)
	}
	return usage
}
