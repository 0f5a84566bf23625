package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The unit's start, as systemd 250+ does it for the directives the unit
// uses, in a scratch root: the credentials, the environment, the state
// directory, then ExecStartPre= and ExecStart= as written (their binary is
// the one the walk installed). The sandbox directives are not applied
// here (they need systemd itself); systemd-analyze rates them
// (security_test.go). User= is not switched to: the commands run as the
// test's user.

// emulated are the [Service] directives startUnit honours or knows to be
// no part of a start's outcome here; a unit with another fails the test,
// which must then learn it.
var emulated = map[string]bool{
	"Type": true, "User": true, "Group": true,
	"EnvironmentFile": true, "Environment": true,
	"LoadCredential": true, "SetCredential": true, "StateDirectory": true,
	"ExecStartPre": true, "ExecStart": true,
	// Not part of a start: stop, reload, restart, limits and the sandbox.
	"ExecReload": true, "KillSignal": true, "TimeoutStopSec": true,
	"Restart": true, "RestartSec": true, "LimitNOFILE": true, "UMask": true,
	"Description": true, "Documentation": true, "After": true, "Wants": true, "WantedBy": true,
}

// sandbox reports whether key is a sandbox directive (not applied here).
func sandbox(key string) bool {
	for _, p := range []string{"Protect", "Private", "Restrict", "SystemCall", "Capability", "Ambient",
		"NoNewPrivileges", "LockPersonality", "MemoryDenyWriteExecute", "RemoveIPC", "DevicePolicy", "IPAddress"} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// rooted moves an absolute host path into root.
func rooted(root, p string) string {
	if strings.HasPrefix(p, "/") {
		return filepath.Join(root, p)
	}
	return p
}

// specifiers expands the unit specifiers startUnit knows: %d (the
// credentials directory) and %%.
func specifiers(v, credDir string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			sb.WriteByte(v[i])
			continue
		}
		if i+1 == len(v) {
			return "", fmt.Errorf("%q: a lone %%", v)
		}
		i++
		switch v[i] {
		case 'd':
			sb.WriteString(credDir)
		case '%':
			sb.WriteByte('%')
		default:
			return "", fmt.Errorf("%q: the specifier %%%c is not emulated", v, v[i])
		}
	}
	return sb.String(), nil
}

// unescapeC reads SetCredential='s C-style escapes: \n, \t, \\, \xHH.
func unescapeC(v string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			sb.WriteByte(v[i])
			continue
		}
		if i+1 == len(v) {
			return "", fmt.Errorf("%q: a lone backslash", v)
		}
		i++
		switch v[i] {
		case 'n':
			sb.WriteByte('\n')
		case 't':
			sb.WriteByte('\t')
		case '\\':
			sb.WriteByte('\\')
		case 'x':
			if i+2 >= len(v) {
				return "", fmt.Errorf("%q: a short \\x", v)
			}
			n, err := strconv.ParseUint(v[i+1:i+3], 16, 8)
			if err != nil {
				return "", fmt.Errorf("%q: %w", v, err)
			}
			sb.WriteByte(byte(n))
			i += 2
		default:
			return "", fmt.Errorf("%q: the escape \\%c is not emulated", v, v[i])
		}
	}
	return sb.String(), nil
}

// systemdEnvFile reads an EnvironmentFile= as systemd does for the lines
// an environment file here holds: KEY=VALUE, comments (# or ;), blanks,
// and values in quotes.
func systemdEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q is not KEY=VALUE", path, n, line)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, s.Err()
}

// unitStep is a failure of one step of the start, named as systemd's
// journal would name it.
func unitStep(t *testing.T, step string, err error, out []byte) {
	t.Helper()
	t.Fatalf("the unit's start failed at %s: %v\n%s", step, err, out)
}

// startUnit starts the unit the walk installed in root as systemd would,
// waits for base's /readyz to answer 200, then stops it with SIGTERM and
// wants a clean exit.
func startUnit(t *testing.T, root, name, base string) {
	t.Helper()
	u := unit(t, filepath.Join(root, "etc/systemd/system", name))
	for key := range u {
		if !emulated[key] && !sandbox(key) {
			t.Fatalf("%s: the walk does not emulate %s=: teach startUnit what systemd does with it", name, key)
		}
	}
	credDir := "/run/credentials/" + name // as systemd names it for a system service
	creds := filepath.Join(root, credDir)
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	// The environment as the service sees the host: its paths are moved
	// into root when the commands run.
	env := map[string]string{"CREDENTIALS_DIRECTORY": credDir}
	for _, dir := range u["StateDirectory"] {
		p := "/var/lib/" + dir
		if err := os.MkdirAll(rooted(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
		env["STATE_DIRECTORY"] = p
	}
	// Credentials: a LoadCredential= whose file cannot be read takes the
	// SetCredential= of the same ID, or fails the start.
	defaults := map[string]string{}
	for _, c := range u["SetCredential"] {
		id, v, _ := strings.Cut(c, ":")
		d, err := unescapeC(v)
		if err != nil {
			unitStep(t, "SetCredential="+c, err, nil)
		}
		defaults[id] = d
	}
	for _, c := range u["LoadCredential"] {
		id, src, _ := strings.Cut(c, ":")
		b, err := os.ReadFile(rooted(root, src))
		if d, ok := defaults[id]; err != nil && ok {
			b, err = []byte(d), nil
		}
		if err != nil {
			unitStep(t, "LoadCredential="+c, err, nil)
		}
		if err := os.WriteFile(filepath.Join(creds, id), b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	// Environment= first; EnvironmentFile= overrides it (systemd.exec).
	for _, e := range u["Environment"] {
		if strings.ContainsAny(e, `"' `) {
			t.Fatalf("Environment=%s: one unquoted assignment a line is what the walk reads", e)
		}
		k, v, _ := strings.Cut(e, "=")
		v, err := specifiers(v, credDir)
		if err != nil {
			unitStep(t, "Environment="+e, err, nil)
		}
		env[k] = v
	}
	for _, f := range u["EnvironmentFile"] {
		path, optional := strings.CutPrefix(f, "-")
		vars, err := systemdEnvFile(rooted(root, path))
		if errors.Is(err, os.ErrNotExist) && optional {
			continue
		}
		if err != nil {
			unitStep(t, "EnvironmentFile="+f, err, nil)
		}
		for k, v := range vars {
			env[k] = v
		}
	}
	environ := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for k, v := range env {
		environ = append(environ, k+"="+rooted(root, v))
	}
	command := func(ctx context.Context, key, line string) *exec.Cmd {
		if strings.ContainsAny(line, `"'$%`) || strings.ContainsAny(line[:1], "-@:+!") {
			t.Fatalf("%s=%s: quotes, variables, specifiers and prefixes are not emulated", key, line)
		}
		args := strings.Fields(line)
		cmd := exec.CommandContext(ctx, rooted(root, args[0]), args[1:]...)
		cmd.Env, cmd.Dir = environ, "/"
		return cmd
	}
	for _, line := range u["ExecStartPre"] {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := command(ctx, "ExecStartPre", line).CombinedOutput()
		cancel()
		if err != nil {
			unitStep(t, "ExecStartPre="+line, err, out)
		}
	}
	if len(u["ExecStart"]) != 1 {
		t.Fatalf("ExecStart: got %q, want one", u["ExecStart"])
	}
	line := u["ExecStart"][0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // kills the server if the test ends before it stopped
	cmd := command(ctx, "ExecStart", line)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		unitStep(t, "ExecStart="+line, err, nil)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitReady(base+"/readyz", exited); err != nil {
		cancel()
		unitStep(t, "ExecStart="+line+" (GET /readyz)", err, out.Bytes())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			unitStep(t, "ExecStart="+line+" (SIGTERM)", err, out.Bytes())
		}
	case <-time.After(time.Minute):
		cancel()
		unitStep(t, "ExecStart="+line+" (SIGTERM)", errors.New("still running a minute after SIGTERM"), out.Bytes())
	}
}

// lockedBuffer is the server's output, written by exec's copying
// goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// waitReady polls url until it answers 200, the process exits, or two
// minutes pass (a cold start on a busy 2-core machine is slow, never that
// slow).
func waitReady(url string, exited <-chan error) error {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited before it was ready: %v", err)
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready in 2m: %s", last)
}
