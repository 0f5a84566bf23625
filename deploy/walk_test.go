package deploy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The deploy walk: docs/deploy.md's systemd steps, run as written on a
// scratch root with a real Redis and PostgreSQL, then the unit they
// installed (unitrun_test.go). The doc marks the blocks it walks with
//
//	<!-- deploy-walk: NAME -->
//
// on the line before a ```sh block; the test reads the marks, so the doc
// and the test cannot drift apart.

// walks are the paths through deploy.md's marked blocks, one per SMS
// sender: the shared blocks, then the sender's. Each is a first start
// from zero, and together they walk every marked block.
var walks = []string{"twilio", "console"}

// walkBlocks are the marked blocks in the order deploy.md gives them.
var walkBlocks = []string{"site", "install", "secrets", "twilio", "console"}

// docBlock is one marked shell block of deploy.md: its commands, one a
// line (a line ending in \ goes on on the next), with their line numbers.
type docBlock struct {
	name     string
	commands []docCommand
}

type docCommand struct {
	line int // in deploy.md
	text string
}

// markedBlocks reads deploy.md's blocks marked for the walk.
func markedBlocks(t *testing.T) []docBlock {
	t.Helper()
	b, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	mark := regexp.MustCompile(`^<!-- deploy-walk: ([a-z]+) -->$`)
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		m := mark.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			t.Fatalf("deploy.md:%d: the mark %q must be followed by a ```sh block", i+1, m[1])
		}
		blk := docBlock{name: m[1]}
		var cmd docCommand
		for i += 2; i < len(lines) && lines[i] != "```"; i++ {
			line := lines[i]
			if cmd.text == "" {
				if s := strings.TrimSpace(line); s == "" || strings.HasPrefix(s, "#") {
					continue
				}
				cmd.line = i + 1
			}
			if strings.Contains(line, "<<") {
				t.Fatalf("deploy.md:%d: no here-documents in a walked block (one command a line): %s", i+1, line)
			}
			if more, ok := strings.CutSuffix(line, "\\"); ok {
				cmd.text += more + "\\\n"
				continue
			}
			cmd.text += line
			blk.commands = append(blk.commands, cmd)
			cmd = docCommand{}
		}
		if cmd.text != "" {
			t.Fatalf("deploy.md:%d: the block %q ends inside a command", cmd.line, blk.name)
		}
		out = append(out, blk)
	}
	return out
}

// assignment is a shell variable set at the start of a walked line: a
// value the reader gives (their Redis, their database), which the walk
// replaces with its own.
var assignment = regexp.MustCompile(`^([a-z_][a-z0-9_]*)=(.*)$`)

// hostPath is an absolute path of the host in a command: the walk moves it
// into its scratch root. /dev stays the host's (/dev/stdin, /dev/null).
var hostPath = regexp.MustCompile(`(^|[\s"'=])/(etc|usr|var|run|opt|srv)/`)

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// walkScript is the shell script of one walk: before each command it
// writes the command's name to $WALK_STEP, so that a failure names it;
// sudo runs the command as the test's user and useradd only records the
// user (the test must not add one to the host). values replaces the
// reader's values; steps maps each step's name to its command.
func walkScript(t *testing.T, blocks []docBlock, root string, values map[string]string, used map[string]bool) (script string, steps map[string]string) {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("set -euo pipefail\n")
	sb.WriteString(`sudo() { "$@"; }` + "\n")
	sb.WriteString(`useradd() { printf 'useradd %s\n' "$*" >>"$WALK_LOG"; }` + "\n")
	steps = map[string]string{}
	for _, blk := range blocks {
		for _, c := range blk.commands {
			text := c.text
			if m := assignment.FindStringSubmatch(text); m != nil {
				v, ok := values[m[1]]
				if !ok {
					t.Fatalf("deploy.md:%d: %s=...: give the walk a value for %s", c.line, m[1], m[1])
				}
				used[m[1]] = true
				text = m[1] + "=" + shellQuote(v)
			}
			text = hostPath.ReplaceAllString(text, "${1}"+root+"/${2}/")
			name := fmt.Sprintf("deploy.md:%d (%s)", c.line, blk.name)
			steps[name] = c.text
			fmt.Fprintf(&sb, "printf '%%s' %s >\"$WALK_STEP\"\n%s\n", shellQuote(name), text)
		}
	}
	sb.WriteString(`printf 'done' >"$WALK_STEP"` + "\n")
	return sb.String(), steps
}

// checkout is a scratch copy of the repository (symbolic links to its top
// level), where the walk's go build writes its binary.
func checkout(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == ".git" || e.Name() == "otpguard" {
			continue
		}
		abs, err := filepath.Abs(filepath.Join("..", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// walkEnviron is the test's environment without otpguard's settings, so
// that none of the test's own reaches the walk.
func walkEnviron(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTPGUARD_") && !strings.HasPrefix(kv, "TWILIO_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runWalk runs blocks in a scratch root from the checkout src and fails
// naming the first step that failed.
func runWalk(t *testing.T, root, src string, blocks []docBlock, values map[string]string, used map[string]bool) {
	t.Helper()
	// What any host has before the walk: the directories of the file
	// system's hierarchy it installs into.
	for _, d := range []string{"etc/systemd/system", "usr/local/bin", "usr/sbin", "var/lib", "run"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, steps := walkScript(t, blocks, root, values, used)
	stepFile, logFile := filepath.Join(root, "walk.step"), filepath.Join(root, "walk.log")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = src
	cmd.Env = walkEnviron("WALK_STEP="+stepFile, "WALK_LOG="+logFile)
	out, err := cmd.CombinedOutput()
	step, _ := os.ReadFile(stepFile)
	if err != nil || string(step) != "done" {
		t.Fatalf("the walk failed at %s:\n\t%s\n%v\n%s", step, steps[string(step)], err, out)
	}
	if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), "useradd --system") {
		t.Errorf("the walk adds no system user for the unit's User=: %q", log)
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// walkRedis is the real Redis the walk's server uses: OTPGUARD_TEST_REDIS_URL
// or the one on 127.0.0.1:6379, with a key prefix of the test's own whose
// keys are deleted at the end.
func walkRedis(t *testing.T) (url, prefix string) {
	t.Helper()
	url = os.Getenv("OTPGUARD_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	c := redistest.Client(t, url)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		redistest.Unavailable(t, "Redis at %s: %v", url, err)
	}
	prefix = redistest.Prefix()
	t.Cleanup(func() {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return url, prefix
}

// TestDeployWalk walks docs/deploy.md's systemd steps from zero, once per
// SMS sender, and starts the unit they installed: the first start works.
func TestDeployWalk(t *testing.T) {
	blocks := markedBlocks(t)
	var names []string
	byName := map[string]docBlock{}
	for _, b := range blocks {
		names = append(names, b.name)
		byName[b.name] = b
	}
	if !slices.Equal(names, walkBlocks) {
		t.Fatalf("deploy.md's walked blocks: got %q, want %q (change walkBlocks and walks with the doc)", names, walkBlocks)
	}
	redisURL, prefix := walkRedis(t)
	// One checkout for every walk: the go build of the second finds the
	// first's packages in the build cache (it keys them by directory).
	src := filepath.Join(t.TempDir(), "src")
	checkout(t, src)
	used := map[string]bool{}
	for _, sms := range walks {
		t.Run(sms, func(t *testing.T) {
			root := t.TempDir()
			listen := freeAddr(t)
			values := map[string]string{
				"listen":             listen,
				"redis_url":          redisURL,
				"redis_prefix":       prefix + sms + ":",
				"database_url":       sqltest.Postgres(t),
				"twilio_account_sid": "AC" + strings.Repeat("0", 32),
				"twilio_from":        "+14155550100",
				"twilio_auth_token":  "0123456789abcdef0123456789abcdef",
			}
			var run []docBlock
			for _, name := range []string{"site", "install", "secrets", sms} {
				run = append(run, byName[name])
			}
			runWalk(t, root, src, run, values, used)
			startUnit(t, root, "otpguard.service", "http://"+listen)
			env := installedEnv(t, root)
			if env["OTPGUARD_SMS"] != sms {
				t.Errorf("OTPGUARD_SMS after the walk: got %q, want %q", env["OTPGUARD_SMS"], sms)
			}
			_, err := os.Stat(filepath.Join(root, "etc/otpguard/secrets/twilio_auth_token"))
			if twilio := sms == "twilio"; twilio != (err == nil) {
				t.Errorf("twilio_auth_token written: got %v, want %v", err == nil, twilio)
			}
		})
	}
	for _, name := range []string{"listen", "redis_url", "redis_prefix", "database_url"} {
		if !used[name] && !t.Failed() {
			t.Errorf("deploy.md's walk never sets %s: the server would not use the test's own", name)
		}
	}
}

// installedEnv is the environment file the walk installed.
func installedEnv(t *testing.T, root string) map[string]string {
	t.Helper()
	env, _ := envFile(t, filepath.Join(root, "etc/otpguard/otpguard.env"))
	return env
}
