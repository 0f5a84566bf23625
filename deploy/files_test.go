package deploy_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/config"
)

// knownSettings returns every variable otpguard reads (each name
// LoadConfig asks for, the _FILE variants of secrets included).
func knownSettings(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	if _, err := config.Load(func(k string) string { known[k] = true; return "" }); err != nil {
		t.Fatal(err)
	}
	return known
}

// unit is a systemd unit file's Key=value lines, by key, in order.
func unit(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not Key=value", path, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

// envFile reads NAME=value lines; commented-out settings (#NAME=value)
// are returned too, with commented true, so that an example left for the
// reader to enable names a real setting as well.
func envFile(t *testing.T, path string) (set map[string]string, commented []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set = map[string]string{}
	name := regexp.MustCompile(`^#?([A-Z][A-Z0-9_]*)=(.*)$`)
	s := bufio.NewScanner(f)
	for s.Scan() {
		m := name.FindStringSubmatch(strings.TrimSpace(s.Text()))
		if m == nil {
			continue
		}
		if strings.HasPrefix(s.Text(), "#") {
			commented = append(commented, m[1])
		} else {
			set[m[1]] = m[2]
		}
	}
	return set, commented
}

// commandsOf returns the README's commands table: "otpguard serve", ...
func commandsOf(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("`(otpguard(?: [a-z]+)*)`").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestSystemdUnit: the unit runs real commands of the binary, names only
// real settings, and together with the example environment file makes a
// production configuration otpguard accepts (secrets from files).
func TestSystemdUnit(t *testing.T) {
	u := unit(t, "systemd/otpguard.service")
	commands := commandsOf(t)
	for _, key := range []string{"ExecStartPre", "ExecStart"} {
		for _, line := range u[key] {
			bin, args, _ := strings.Cut(line, " ")
			if filepath.Base(bin) != "otpguard" {
				t.Errorf("%s=%s: want the otpguard binary", key, line)
			}
			if cmd := "otpguard " + args; !slices.Contains(commands, cmd) {
				t.Errorf("%s=%s: %q is not a command in the README's table %q", key, line, cmd, commands)
			}
		}
	}
	if len(u["ExecStart"]) != 1 {
		t.Errorf("ExecStart: got %q, want one", u["ExecStart"])
	}
	known := knownSettings(t)
	env, commented := envFile(t, "systemd/otpguard.env")
	credentials := map[string]string{} // name -> source path
	for _, c := range u["LoadCredential"] {
		name, src, _ := strings.Cut(c, ":")
		credentials[name] = src
	}
	dir := t.TempDir()
	for _, e := range u["Environment"] {
		name, value, _ := strings.Cut(e, "=")
		if cred, ok := strings.CutPrefix(value, "%d/"); ok {
			if _, ok := credentials[cred]; !ok {
				t.Errorf("Environment=%s: no LoadCredential=%s", e, cred)
			}
			value = filepath.Join(dir, cred)
		}
		env[name] = value
	}
	for _, name := range append(commented, keys(env)...) {
		if !known[name] {
			t.Errorf("%s is not an otpguard setting", name)
		}
	}
	// The credentials, as an operator would write them.
	secrets := map[string]string{
		"api_keys":          "ogk_0123456789abcdef0123,ogk_fedcba9876543210fedc",
		"ops_keys":          "ogo_0123456789abcdef0123",
		"hmac_key":          strings.Repeat("k", 32),
		"database_url":      "postgres://otpguard@db.internal/otpguard?sslmode=require",
		"twilio_auth_token": "0123456789abcdef0123456789abcdef",
	}
	for name := range credentials {
		v, ok := secrets[name]
		if !ok {
			t.Fatalf("LoadCredential %s: give the test a value for it", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The example policy file the walk installs where OTPGUARD_CONFIG says.
	env["OTPGUARD_CONFIG"], env["OTPGUARD_DATA_DIR"] = "systemd/policies.yaml", dir
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("the unit's configuration is refused: %v", err)
	}
	if cfg.Embedded() || cfg.DatabaseURL == "" || len(cfg.OpsKeys) == 0 || len(cfg.TrustedProxies) == 0 || cfg.SMS != "twilio" {
		t.Errorf("the unit's configuration is not a production one: embedded %v, database %v, ops keys %d, trusted proxies %v, sms %q",
			cfg.Embedded(), cfg.DatabaseURL != "", len(cfg.OpsKeys), cfg.TrustedProxies, cfg.SMS)
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	if w := config.UnknownSettings(environ); len(w) > 0 {
		t.Errorf("unknown settings: %q", w)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestContainerfile: the image starts from nothing (no registry to pull
// from), runs the binary deploy/image.sh puts in its context, and sets
// only real settings. TestImage builds it and inspects the result.
func TestContainerfile(t *testing.T) {
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	froms := regexp.MustCompile(`(?m)^FROM (.*)$`).FindAllStringSubmatch(text, -1)
	if len(froms) != 1 || froms[0][1] != "scratch" {
		t.Errorf("Containerfile: FROM lines %v, want FROM scratch alone (no base to pull)", froms)
	}
	copyLine := regexp.MustCompile(`(?m)^COPY otpguard (\S+)$`).FindStringSubmatch(text)
	if copyLine == nil {
		t.Fatal("Containerfile: no COPY otpguard <path> (the binary image.sh builds)")
	}
	if want := fmt.Sprintf(`ENTRYPOINT ["%s"]`, copyLine[1]); !strings.Contains(text, want) {
		t.Errorf("Containerfile: want %s, the binary it copies", want)
	}
	if !strings.Contains(text, `CMD ["serve"]`) {
		t.Error(`Containerfile: want CMD ["serve"]`)
	}
	script, err := os.ReadFile("image.sh")
	if err != nil || !strings.Contains(string(script), `mv "$bin" "$ctx/otpguard"`) {
		t.Errorf("image.sh does not put the release binary at otpguard in the build context: %v", err)
	}
	known := knownSettings(t)
	for _, m := range regexp.MustCompile(`(?m)^ENV (.*)$`).FindAllStringSubmatch(text, -1) {
		for _, kv := range strings.Fields(m[1]) {
			if name, _, _ := strings.Cut(kv, "="); !known[name] {
				t.Errorf("Containerfile: ENV %s is not an otpguard setting", name)
			}
		}
	}
}
