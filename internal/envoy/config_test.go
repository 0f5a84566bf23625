package envoy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/limit"
)

// TestLoadRefuses: what the peer refuses, and what otpguard cannot
// honour, is refused at start, naming the file and the descriptor.
func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // in the error
	}{
		{"empty domain", "descriptors: []", []string{"configa.yaml", "empty domain"}},
		{"unknown field", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n", []string{"configa.yaml", "ratelimit"}},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", []string{"configa.yaml", "empty key"}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", []string{"configa.yaml", "d.k", "duplicate"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			[]string{"configa.yaml", "d.k", "invalid rate limit unit 'fortnight'"}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			[]string{"d.k", "unlimited"}},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: a}]}\n",
			[]string{"d.k", "replaces"}},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			[]string{"d.k=v", "share_threshold"}},
		{"brace", "domain: d\ndescriptors:\n  - key: k\n    value: 'a{b}'\n", []string{"d.k=a{b}", "hash tag"}},
		{"sync on a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {otpguard: {mode: sync}}\n",
			[]string{"d.k", "token_bucket"}},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {otpguard: {algorithm: gcra}}\n",
			[]string{"d.k", "gcra"}},
		{"local without limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {otpguard: {on_store_error: local}}\n",
			[]string{"d.k", "local_limit"}},
		{"unknown extension field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {otpguard: {burst: 3}}\n",
			[]string{"configa.yaml", "burst"}},
		{"extension without rate_limit", "domain: d\ndescriptors:\n  - key: k\n    metadata: {otpguard: {on_store_error: closed}}\n", []string{"d.k", "rate_limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := envoy.ParseFile("configa.yaml", []byte(tt.yaml))
			if err == nil {
				_, err = envoy.Load([]envoy.File{f})
			}
			if err == nil {
				t.Fatalf("loaded; want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestLoadRefusesPolicyNameTaken: two domains' descriptors, or one and a
// domain's limit overrides, would share a policy (and so its counters).
func TestLoadRefusesPolicyNameTaken(t *testing.T) {
	for name, files := range map[string][2]string{
		"two descriptors": {"domain: a\ndescriptors:\n  - key: b.c\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"domain: a.b\ndescriptors:\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
		"limit overrides": {"domain: a.b\n",
			"domain: a\ndescriptors:\n  - key: b (limit override per minute)\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
	} {
		t.Run(name, func(t *testing.T) {
			a, errA := envoy.ParseFile("a.yaml", []byte(files[0]))
			b, errB := envoy.ParseFile("b.yaml", []byte(files[1]))
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			for _, order := range [][]envoy.File{{a, b}, {b, a}} {
				if _, err := envoy.Load(order); err == nil || !strings.Contains(err.Error(), "taken") {
					t.Errorf("Load: %v, want the name taken", err)
				}
			}
		})
	}
}

func TestLoadRefusesDuplicateDomain(t *testing.T) {
	a, _ := envoy.ParseFile("a.yaml", []byte("domain: d\n"))
	b, _ := envoy.ParseFile("b.yaml", []byte("domain: d\n"))
	_, err := envoy.Load([]envoy.File{a, b})
	if err == nil || !strings.Contains(err.Error(), "b.yaml") || !strings.Contains(err.Error(), "a.yaml") {
		t.Fatalf("Load: %v, want a duplicate domain error naming both files", err)
	}
}

// TestPolicies: each rule becomes a policy named by domain and path, a
// fixed window of the unit counting every hit, unless the extension asks
// for a token bucket.
func TestPolicies(t *testing.T) {
	r := rulesOf(t, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: week, requests_per_unit: 100}
    shadow_mode: true
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 60}
    metadata:
      team: payments
      otpguard: {algorithm: token_bucket, on_store_error: closed, mode: sync, sync_interval: 250ms}
  - key: ldap
    rate_limit: {unlimited: true}
`)
	want := map[string]limit.Policy{
		"messaging.message_type=marketing.to_number": {Algorithm: limit.FixedWindow, Limit: 5, Window: 24 * time.Hour,
			OnStoreError: limit.FallbackOpen, Independent: true},
		"messaging.to_number": {Algorithm: limit.FixedWindow, Limit: 100, Window: 7 * 24 * time.Hour, Shadow: true,
			OnStoreError: limit.FallbackOpen, Independent: true},
		"messaging.api": {Algorithm: limit.TokenBucket, Capacity: 60, RefillPerSecond: 1, OnStoreError: limit.FallbackClosed,
			Mode: limit.ModeSync, SyncInterval: 250 * time.Millisecond, Independent: true},
	}
	// And one per unit for the descriptors carrying their own limit.
	for unit, secs := range map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "month": 30 * 86400, "year": 365 * 86400} {
		want["messaging (limit override per "+unit+")"] = limit.Policy{Algorithm: limit.FixedWindow,
			Window: time.Duration(secs) * time.Second, OnStoreError: limit.FallbackOpen, Independent: true}
	}
	if diff := cmp.Diff(want, r.Policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	if len(r.Notes) != 2 {
		t.Errorf("notes: %q, want one for detailed_metric and one for metadata", r.Notes)
	}
}

// TestReadFiles: a directory's .yaml and .yml files in lexical order, its
// dot entries (a ConfigMap's ..data) skipped; or one file.
func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yml", "domain: b\n")
	write("a.yaml", "domain: a\n")
	write("sub/c.yaml", "domain: c\n")
	write("..data/a.yaml", "domain: a\n")
	write("notes.txt", "not yaml")
	files, err := envoy.ReadFiles(dir, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f.Name))
	}
	if diff := cmp.Diff([]string{"a.yaml", "b.yml", "c.yaml"}, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if _, err := envoy.Load(files); err != nil {
		t.Errorf("Load: %v", err)
	}
	one, err := envoy.ReadFiles(filepath.Join(dir, "b.yml"), os.ReadFile)
	if err != nil || len(one) != 1 {
		t.Errorf("ReadFiles(one file) = %d files, %v; want 1", len(one), err)
	}
	if _, err := envoy.ReadFiles(t.TempDir(), os.ReadFile); err == nil {
		t.Error("ReadFiles(empty dir): no error")
	}
}
