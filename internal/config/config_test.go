package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTrustedProxiesSetting(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []netip.Prefix
		err         string
	}{
		{name: "unset: none trusted", value: ""},
		{name: "CIDR list", value: "10.0.0.0/8, 2001:db8::/32",
			want: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}},
		{name: "a bare address is one host", value: "192.0.2.7",
			want: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}},
		{name: "host bits are masked", value: "10.1.2.3/16",
			want: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
		{name: "not an address", value: "10.0.0.0/8,proxy.internal", err: "OTPGUARD_TRUSTED_PROXIES"},
		{name: "bad mask", value: "10.0.0.0/33", err: "OTPGUARD_TRUSTED_PROXIES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(func(k string) string {
				if k == "OTPGUARD_TRUSTED_PROXIES" {
					return tc.value
				}
				return ""
			})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg.TrustedProxies, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("TrustedProxies (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSecretsFromFiles: every secret, the API and ops keys and the URLs
// that may hold a password included, can come from a file.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	vars := map[string]string{
		"OTPGUARD_API_KEYS_FILE":       file("api", "api-key-0123456789abcdef,api-key-fedcba9876543210\n"),
		"OTPGUARD_OPS_KEYS_FILE":       file("ops", "ops-key-0123456789abcdef\n"),
		"OTPGUARD_HMAC_KEY_FILE":       file("hmac", "0123456789abcdef0123456789abcdef\n"),
		"OTPGUARD_REDIS_URL_FILE":      file("redis", "redis://:pw@10.0.0.5:6379/0\n"),
		"OTPGUARD_DATABASE_URL_FILE":   file("db", "postgres://otpguard:pw@db/otpguard\n"),
		"OTPGUARD_REDIS_PASSWORD_FILE": file("redispw", "pw2\n"),
		"TWILIO_AUTH_TOKEN_FILE":       file("twilio", "token\n"),
		"OTPGUARD_SMS":                 "console",
	}
	cfg, err := Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	got := []string{strings.Join(cfg.APIKeys, ","), strings.Join(cfg.OpsKeys, ","), string(cfg.HMACKey),
		cfg.RedisURL, cfg.DatabaseURL, cfg.Redis.Password, cfg.Twilio.AuthToken}
	want := []string{"api-key-0123456789abcdef,api-key-fedcba9876543210", "ops-key-0123456789abcdef",
		"0123456789abcdef0123456789abcdef", "redis://:pw@10.0.0.5:6379/0", "postgres://otpguard:pw@db/otpguard", "pw2", "token"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestEveryVariableIsKnown: each OTPGUARD_ name the service's code reads
// is in the list of settings, so UnknownSettings never warns of a real
// setting. The names are taken from the string literals of the non-test
// Go files under internal/ and cmd/otpguard.
func TestEveryVariableIsKnown(t *testing.T) {
	var environ []string
	for _, dir := range []string{"..", "../../cmd/otpguard"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir // no package: the go tool skips it too (twilio-node lives there)
			}
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
				strings.Contains(path, "redistest") || strings.Contains(path, "sqltest") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && regexp.MustCompile(`^OTPGUARD_[A-Z0-9_]+$`).MatchString(v) {
						environ = append(environ, v+"=x ("+path+")")
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(environ) < 20 {
		t.Fatalf("found %d OTPGUARD_ names in the source, want the settings", len(environ))
	}
	if warns := UnknownSettings(environ); len(warns) > 0 {
		t.Errorf("names read by the code but not in the list of settings:\n%s", strings.Join(warns, "\n"))
	}
	if w := UnknownSettings([]string{"OTPGUARD_REDIS_TIMOUT=5ms"}); len(w) != 1 || !strings.Contains(w[0], "did you mean OTPGUARD_REDIS_TIMEOUT?") {
		t.Errorf("misspelt name: got %q", w)
	}
}
