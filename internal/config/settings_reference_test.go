package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/store"
)

var update = flag.Bool("update", false, "rewrite docs/reference.md's table of environment variables from the list of settings")

// referencePath is the file whose settings section is written from the list.
const referencePath = "../../docs/reference.md"

// The section of docs/reference.md that is the list's.
const (
	settingsBegin = "<!-- settings:begin -->"
	settingsEnd   = "<!-- settings:end -->"
)

// TestSettingsReference: docs/reference.md's table of environment
// variables is the list of settings (settings.go), written out. After a
// change to the list: go generate ./internal/config (go test -run
// TestSettingsReference ./internal/config -args -update).
func TestSettingsReference(t *testing.T) {
	doc, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(doc, []byte(settingsBegin)), bytes.Index(doc, []byte(settingsEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s has no %s ... %s section", referencePath, settingsBegin, settingsEnd)
	}
	begin += len(settingsBegin)
	want := "\n" + settingsReference()
	if *update {
		out := append(append(append([]byte(nil), doc[:begin]...), want...), doc[end:]...)
		if err := os.WriteFile(referencePath, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, string(doc[begin:end])); diff != "" {
		t.Errorf("%s's settings section is not the list's; run go generate ./internal/config (-want +got):\n%s", referencePath, diff)
	}
}

// settingsReference is the section: a table with a row per setting.
func settingsReference() string {
	var b strings.Builder
	b.WriteString(`Every setting is an environment variable and has a working default; with
none set, otpguard runs on the embedded Redis (miniredis), a SQLite file and
the console sender, bound to 127.0.0.1. A secret also accepts a ` + "`_FILE`" + `
variant holding the path of a file with the value (trailing newlines are
ignored; setting both is an error), e.g.
` + "`OTPGUARD_API_KEYS_FILE=/run/secrets/otpguard_api_keys`" + `. An ` + "`OTPGUARD_`" + `
variable otpguard does not read is reported at start-up and by ` + "`otpguard\nconfig check`" + ` as a warning naming the nearest known one.

| name | default | description | example |
|---|---|---|---|
`)
	for _, s := range settings {
		name := "`" + s.name + "`"
		if s.secret {
			name += " (secret: `_FILE` accepted)"
		}
		def := s.defDoc
		switch {
		case s.def != "" && s.defDoc != "":
			def = "`" + s.def + "` " + s.defDoc
		case s.def != "":
			def = "`" + s.def + "`"
		case def == "":
			def = "unset"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | `%s` |\n", name, def, s.doc, s.example)
	}
	b.WriteString(`
"A shared Redis" means ` + "`OTPGUARD_REDIS_URL`" + ` set, or ` + "`OTPGUARD_REDIS_MODE`" + `
` + "`cluster`" + ` or ` + "`sentinel`" + `. The OpenTelemetry SDK reads the rest of its
variables itself, as its specification says (` + "`OTEL_EXPORTER_OTLP_HEADERS`" + `,
` + "`_TIMEOUT`, `_COMPRESSION`, `_CERTIFICATE`, `_INSECURE`, `OTEL_BSP_*`" + `). The tests
read a few more (` + "`OTPGUARD_TEST_*`, `OTPGUARD_REQUIRE_SERVICES`, `OTPGUARD_ARTIFACTS`" + `),
and the load command ` + "`otpguard-load`" + ` reads ` + "`OTPGUARD_API_KEY`" + ` when given no
` + "`-key`" + `.
`)
	return b.String()
}

// TestSettingsDefaults: the default the list states is the one in force:
// setting a variable to its stated default changes nothing (the policies
// aside: no file, the defaults), and the defaults other packages own are
// the list's.
func TestSettingsDefaults(t *testing.T) {
	unset, err := Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if s.def == "" || s.parse == nil {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			set, err := Load(func(k string) string { return map[string]string{s.name: s.def}[k] })
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(unset, set, cmp.AllowUnexported(Config{}, otelEnv{}), cmpopts.IgnoreFields(Config{}, "Policies")); diff != "" {
				t.Errorf("%s=%s differs from unset (-unset +set):\n%s", s.name, s.def, diff)
			}
		})
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"OTPGUARD_AUDIT_RETENTION", unset.AuditRetention, ops.DefaultAuditRetention},
		{"OTPGUARD_DENYLIST_REFRESH", unset.DenyListRefresh, ops.DefaultDenyRefresh},
		{"OTPGUARD_DATABASE_TIMEOUT", unset.DatabaseTimeout, sqlstore.DefaultTimeout},
		{"OTPGUARD_REDIS_MODE", unset.Redis.Mode, store.RedisSingle},
		{"OTPGUARD_REDIS_TIMEOUT (embedded)", unset.RedisTimeout, time.Second},
		{"OTPGUARD_REDIS_PIPELINES", strconv.Itoa(unset.RedisPipelines), strconv.Itoa(DefaultRedisPipelines)},
		{"OTPGUARD_LOG_ALLOWED_CHECKS", unset.LogAllowedChecks, DefaultLogAllowedChecks},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: unset gives %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}
