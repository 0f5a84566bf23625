package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// composeFile is the part of compose.yaml the test reads.
type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Environment map[string]string `yaml:"environment"`
		Secrets     []string          `yaml:"secrets"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Secrets map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// TestComposeFile: compose.yaml runs otpguard built from this repository
// on a Redis 7 and a PostgreSQL that it waits for until they are healthy,
// names only real settings, gives every secret as a file, and its
// settings, with its secrets, make a configuration otpguard accepts.
func TestComposeFile(t *testing.T) {
	c := readCompose(t)
	var names []string
	for name := range c.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"otpguard", "postgres", "redis"}; !slices.Equal(names, want) {
		t.Fatalf("services: got %q, want %q", names, want)
	}
	// Images by their full name: podman refuses a short name it cannot
	// resolve without asking.
	fullName := regexp.MustCompile(`^[a-z0-9.-]+\.[a-z]+/[a-z0-9/_-]+:(\d+)$`)
	for _, name := range []string{"redis", "postgres"} {
		m := fullName.FindStringSubmatch(c.Services[name].Image)
		if m == nil {
			t.Errorf("%s: image %q: want registry/name:major", name, c.Services[name].Image)
			continue
		}
		if major, _ := strconv.Atoi(m[1]); name == "redis" && major < 7 {
			t.Errorf("redis: image %q: otpguard needs Redis 7 or newer", c.Services[name].Image)
		}
		if hc := c.Services[name].Healthcheck; hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" {
			t.Errorf("%s: want a healthcheck [CMD, ...]", name)
		}
		if got := c.Services["otpguard"].DependsOn[name].Condition; got != "service_healthy" {
			t.Errorf("otpguard: depends_on %s: got condition %q, want service_healthy", name, got)
		}
	}
	og := c.Services["otpguard"]
	// The Containerfile copies from the context deploy/image.sh prepares,
	// which compose cannot make: compose runs the image that script built
	// (and docs/deploy.md says so), and builds none.
	if og.Build != nil {
		t.Errorf("otpguard: build %+v: compose cannot build the image; run deploy/image.sh and name its tag", *og.Build)
	}
	if og.Image != "localhost/otpguard:latest" {
		t.Errorf("otpguard: image %q, want localhost/otpguard:latest", og.Image)
	}
	if doc, err := os.ReadFile("../docs/deploy.md"); err != nil || !strings.Contains(string(doc), "deploy/image.sh "+og.Image) {
		t.Errorf("docs/deploy.md does not build %s with deploy/image.sh before compose: %v", og.Image, err)
	}
	known := knownSettings(t)
	dir := t.TempDir()
	env := map[string]string{}
	for name, value := range og.Environment {
		if !known[name] {
			t.Errorf("otpguard: %s is not an otpguard setting", name)
		}
		env[name] = value
	}
	// Secrets: each _FILE names /run/secrets/<one the service is given>,
	// from a file of the host; the test writes one of each.
	samples := map[string]string{
		"api_keys":     "ogk_0123456789abcdef0123",
		"ops_keys":     "ogo_0123456789abcdef0123",
		"hmac_key":     strings.Repeat("k", 32),
		"database_url": "postgres://otpguard:pw@postgres:5432/otpguard?sslmode=disable",
	}
	for name, value := range og.Environment {
		if !strings.HasSuffix(name, "_FILE") {
			continue
		}
		secret, ok := strings.CutPrefix(value, "/run/secrets/")
		if !ok || !slices.Contains(og.Secrets, secret) || c.Secrets[secret].File == "" {
			t.Errorf("otpguard: %s=%s: want /run/secrets/<a secret given to the service, from a file>", name, value)
			continue
		}
		sample, ok := samples[secret]
		if !ok {
			t.Fatalf("secret %s: give the test a value for it", secret)
		}
		env[name] = filepath.Join(dir, secret)
		if err := os.WriteFile(env[name], []byte(sample+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pg := c.Services["postgres"]
	if secret, _ := strings.CutPrefix(pg.Environment["POSTGRES_PASSWORD_FILE"], "/run/secrets/"); !slices.Contains(pg.Secrets, secret) {
		t.Errorf("postgres: POSTGRES_PASSWORD_FILE=%s: not a secret given to it", pg.Environment["POSTGRES_PASSWORD_FILE"])
	}
	// The policy file: mounted from a file of this repository.
	for _, v := range og.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		dst, _, _ = strings.Cut(dst, ":")
		if dst == env["OTPGUARD_CONFIG"] {
			env["OTPGUARD_CONFIG"] = src
		}
	}
	if _, err := os.Stat(env["OTPGUARD_CONFIG"]); err != nil {
		t.Errorf("otpguard: OTPGUARD_CONFIG is no file mounted from the repository: %v", err)
	}
	if !strings.Contains(env["OTPGUARD_REDIS_URL"], "//redis:") {
		t.Errorf("otpguard: OTPGUARD_REDIS_URL=%s: want the compose service redis", env["OTPGUARD_REDIS_URL"])
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("compose.yaml's otpguard configuration is refused: %v", err)
	}
	if cfg.Embedded() || cfg.DatabaseURL == "" || len(cfg.OpsKeys) == 0 {
		t.Errorf("compose.yaml's otpguard is not on its Redis and PostgreSQL with an ops key: embedded %v, database %v, ops keys %d",
			cfg.Embedded(), cfg.DatabaseURL != "", len(cfg.OpsKeys))
	}
}

// TestComposeFileByTool has a compose implementation read compose.yaml
// (`config`, which parses and checks it against the compose schema
// without running anything): docker-compose, `docker compose` or
// `podman compose`, whichever is installed (CI installs docker-compose).
func TestComposeFileByTool(t *testing.T) {
	var tool []string
	switch {
	case lookPath("docker-compose"):
		tool = []string{"docker-compose"}
	case lookPath("docker") && exec.Command("docker", "compose", "version").Run() == nil:
		tool = []string{"docker", "compose"}
	case lookPath("podman") && exec.Command("podman", "compose", "version").Run() == nil:
		tool = []string{"podman", "compose"}
	default:
		redistest.Unavailable(t, "no compose tool (apt-get install docker-compose)")
	}
	args := append(tool[1:], "-f", "compose.yaml", "config", "-q")
	if out, err := exec.Command(tool[0], args...).CombinedOutput(); err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(tool, " "), err, out)
	}
}

func lookPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}
