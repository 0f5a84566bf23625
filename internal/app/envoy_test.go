package app

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/otpguard/otpguard/internal/config"
)

func writeEnvoyRules(t *testing.T, path, yaml string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEnvoyServed boots the service with OTPGUARD_GRPC_ADDR and
// OTPGUARD_ENVOY_CONFIG, asks it over gRPC, reloads the rules as SIGHUP
// does (a bad file keeps them), and finds the decisions in /metrics.
func TestEnvoyServed(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	writeEnvoyRules(t, rules, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 2}\n")
	env := map[string]string{"OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_ADDR": "127.0.0.1:0",
		"OTPGUARD_GRPC_ADDR": "127.0.0.1:0", "OTPGUARD_ENVOY_CONFIG": dir}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	c := envoyClient(t, a)
	ask := func(step, key string, wantCode pb.RateLimitResponse_Code, wantLimit, wantRemaining uint32) {
		t.Helper()
		req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}}}
		got, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		st := got.GetStatuses()[0]
		if got.GetOverallCode() != wantCode || st.GetCurrentLimit().GetRequestsPerUnit() != wantLimit || st.GetLimitRemaining() != wantRemaining {
			t.Fatalf("%s: got %v, want %v with limit %d and %d remaining", step, got, wantCode, wantLimit, wantRemaining)
		}
	}
	ask("first", "k", pb.RateLimitResponse_OK, 2, 1)
	ask("second", "k", pb.RateLimitResponse_OK, 2, 0)
	ask("third", "k", pb.RateLimitResponse_OVER_LIMIT, 2, 0)

	writeEnvoyRules(t, rules, "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	if err := a.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	ask("after reload", "k2", pb.RateLimitResponse_OK, 5, 4)
	writeEnvoyRules(t, rules, "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: fortnight}\n")
	if err := a.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "rules.yaml") {
		t.Fatalf("Reload of a bad file: %v, want an error naming it", err)
	}
	ask("bad file kept the rules", "k2", pb.RateLimitResponse_OK, 5, 3)

	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`otpguard_decisions_total{outcome="allowed",policy="d.k",service=""} 2`,
		`otpguard_decisions_total{outcome="rate_limited",policy="d.k",service=""} 1`,
		`otpguard_envoy_descriptors_total{domain="d",result="decided"} 5`,
		`otpguard_envoy_config_reload_total{result="error"} 1`,
	} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestEnvoyReloadRefusesWhatIsNotAFile: a rule file is read only when it
// is a regular file (a link to one is fine) of at most (1 << 20)
// bytes, as the policy file is. A FIFO named *.yaml must not block the
// reload (nor, through it, every later reload and the shutdown), and a
// link to /dev/zero must not fill memory: each is refused, the rules in
// force are kept, a later reload works, and Run still returns.
func TestEnvoyReloadRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	writeEnvoyRules(t, filepath.Join(dir, "rules.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	env := map[string]string{"OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_ADDR": "127.0.0.1:0",
		"OTPGUARD_GRPC_ADDR": "127.0.0.1:0", "OTPGUARD_ENVOY_CONFIG": dir, "OTPGUARD_REDIS_TIMEOUT": "1s"}
	a, c, stop := serveEnvoy(t, env)
	ask := func(step, key string, wantLimit, wantRemaining uint32) {
		t.Helper()
		req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}}}
		got, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		st := got.GetStatuses()[0]
		if st.GetCurrentLimit().GetRequestsPerUnit() != wantLimit || st.GetLimitRemaining() != wantRemaining {
			t.Fatalf("%s: got %v, want limit %d and %d remaining", step, got, wantLimit, wantRemaining)
		}
	}
	left := uint32(4)
	ask("at start", "k", 5, left)

	bad := filepath.Join(dir, "bad.yaml")
	// A reload blocked on the FIFO would hold it open for ever: the
	// cleanup opens the other end, so that a failing run still ends.
	t.Cleanup(func() {
		if f, err := os.OpenFile(bad, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	for _, tc := range []struct {
		name, want string
		make       func(string) error
	}{
		{"a FIFO", "not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"a link to /dev/zero", "not a regular file", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"a directory", "not a regular file", func(p string) error {
			return os.Symlink(t.TempDir(), p) // a link: WalkDir lists it as a file
		}},
		{"too big", "larger than 1 MiB", func(p string) error {
			return os.WriteFile(p, []byte("domain: b\n#"+strings.Repeat("x", (1<<20))+"\n"), 0o600)
		}},
	} {
		if err := tc.make(bad); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Reload(context.Background()) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: Reload = %v, want an error saying %q", tc.name, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Reload blocked", tc.name)
		}
		if err := os.Remove(bad); err != nil {
			t.Fatal(err)
		}
		left--
		ask(tc.name+" kept the rules", "k", 5, left)
	}

	writeEnvoyRules(t, filepath.Join(dir, "rules.yaml"), "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: day, requests_per_unit: 7}\n")
	if err := a.Reload(context.Background()); err != nil {
		t.Fatalf("Reload of a good file after the refused ones: %v", err)
	}
	ask("after a good reload", "k2", 7, 6)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestEnvoySharesInFlightSlots: Envoy's calls and the API's decisions
// take slots of one bound (OTPGUARD_MAX_IN_FLIGHT): with its only slot
// taken, a gRPC call is refused UNAVAILABLE and a check 503 overloaded;
// with it free, both are decided.
func TestEnvoySharesInFlightSlots(t *testing.T) {
	dir := t.TempDir()
	writeEnvoyRules(t, filepath.Join(dir, "rules.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	const key = "test-api-key-0123456789"
	env := map[string]string{"OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_ADDR": "127.0.0.1:0", "OTPGUARD_API_KEYS": key,
		"OTPGUARD_GRPC_ADDR": "127.0.0.1:0", "OTPGUARD_ENVOY_CONFIG": dir, "OTPGUARD_MAX_IN_FLIGHT": "1", "OTPGUARD_REDIS_TIMEOUT": "1s"}
	a, c, _ := serveEnvoy(t, env)
	grpcCode := func() codes.Code {
		t.Helper()
		req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
		_, err := c.ShouldRateLimit(context.Background(), req)
		return status.Code(err)
	}
	httpStatus := func() int {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/limits/check", strings.NewReader(`{"policy":"default","key":"k"}`))
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, r)
		return w.Code
	}
	if got := grpcCode(); got != codes.OK {
		t.Fatalf("gRPC with the slot free: %v, want OK", got)
	}
	// The only slot, taken as a decision under way would take it.
	if !a.inFlight.Enter("/test") {
		t.Fatal("the only slot is taken")
	}
	if got := grpcCode(); got != codes.Unavailable {
		t.Errorf("gRPC with the only slot taken: %v, want UNAVAILABLE", got)
	}
	if got := httpStatus(); got != http.StatusServiceUnavailable {
		t.Errorf("POST /limits/check with the only slot taken: %d, want 503", got)
	}
	a.inFlight.Leave(nil, "/test")
	if got := grpcCode(); got != codes.OK {
		t.Errorf("gRPC once the slot is free: %v, want OK", got)
	}
	if got := httpStatus(); got != http.StatusOK {
		t.Errorf("POST /limits/check once the slot is free: %d, want 200", got)
	}
}

// serveEnvoy builds the service from env and runs it until stop, which
// returns Run's error (or says that Run did not return); c asks its gRPC
// listener.
func serveEnvoy(t *testing.T, env map[string]string) (a *App, c pb.RateLimitServiceClient, stop func() error) {
	t.Helper()
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err = New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-ran:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Run did not return after its context ended")
		}
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return a, envoyClient(t, a), stop
}

// TestEnvoySettings: the listener and its rules come together, and a bad
// rule file is refused at start, named.
func TestEnvoySettings(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeEnvoyRules(t, bad, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"addr without rules", map[string]string{"OTPGUARD_GRPC_ADDR": "127.0.0.1:0"}, "OTPGUARD_ENVOY_CONFIG"},
		{"rules without addr", map[string]string{"OTPGUARD_ENVOY_CONFIG": dir}, "bad.yaml"},
		{"bad rules", map[string]string{"OTPGUARD_GRPC_ADDR": "127.0.0.1:0", "OTPGUARD_ENVOY_CONFIG": bad}, "fortnight"},
		{"cert without key", map[string]string{"OTPGUARD_GRPC_ADDR": "127.0.0.1:0", "OTPGUARD_GRPC_TLS_CERT_FILE": "c.pem"}, "OTPGUARD_GRPC_TLS_KEY_FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["OTPGUARD_DATA_DIR"] = t.TempDir()
			cfg, err := config.Load(func(k string) string { return tt.env[k] })
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("config: %v, want an error saying %s", err, tt.want)
			}
		})
	}
}

// envoyClient waits (10 s at most) for a's gRPC listener and returns a
// client of its rate-limit service, closed when the test ends.
func envoyClient(t *testing.T, a *App) pb.RateLimitServiceClient {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.GRPCAddr() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.GRPCAddr() == nil {
		t.Fatal("the gRPC listener did not start")
	}
	conn, err := grpc.NewClient(a.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}
