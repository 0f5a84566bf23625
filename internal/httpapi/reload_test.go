package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// policyYAML is a policy file with two fixed-window limit policies and
// the OTP per-phone limit: enough to tell one file from another in every
// answer.
func policyYAML(a, b, perPhone int64) string {
	return fmt.Sprintf(`otp:
  per_phone: {limit: %d, window: 10m}
limits:
  a: {algorithm: fixed_window, limit: %d, window: 1h, on_store_error: closed}
  b: {algorithm: fixed_window, limit: %d, window: 1h, on_store_error: closed}
`, perPhone, a, b)
}

// policyFromYAML is what the file says, as the instance starts with it.
func policyFromYAML(t *testing.T, path string) guard.Policies {
	t.Helper()
	cfg, err := config.Load(func(k string) string {
		if k == "OTPGUARD_CONFIG" {
			return path
		}
		return ""
	})
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	return cfg.Policies
}

// reloadInstance starts one instance on a real Redis with the policy file
// at path (written with body first).
func reloadInstance(t *testing.T, body string) (*instance, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, body)
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), policyFromYAML(t, path))
	cfg.ConfigFile = path
	return startInstance(t, cfg, &guardtest.Outbox{}), path
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

type checkAnswer struct {
	Allowed   bool `json:"allowed"`
	Decisions []struct {
		Policy    string `json:"policy"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
	} `json:"decisions"`
}

func check(t testing.TB, in *instance, body string) (int, checkAnswer) {
	t.Helper()
	c := &cluster{instances: []*instance{in}}
	r := c.do(t, 0, "POST", "/limits/check", body)
	var ans checkAnswer
	if r.Status == 200 || r.Status == 429 {
		if err := json.Unmarshal(r.Body, &ans); err != nil {
			t.Errorf("check: %d %s: %v", r.Status, r.Body, err)
		}
	}
	return r.Status, ans
}

// TestReloadUnderTrafficIsAtomic alternates two policy files whose limits
// differ in two rules while requests run, and checks that every answer is
// entirely one file's: a batch never sees rule a from one file and rule b
// from the other (run it with -race).
func TestReloadUnderTrafficIsAtomic(t *testing.T) {
	files := []string{policyYAML(1000, 2000, 3), policyYAML(3000, 4000, 5)}
	in, path := reloadInstance(t, files[0])
	want := map[[2]int64]bool{{1000, 2000}: true, {3000, 4000}: true}

	const workers, perWorker, reloads = 6, 40, 20
	var wg sync.WaitGroup
	seen := make([]map[[2]int64]int, workers)
	for w := range workers {
		seen[w] = map[[2]int64]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				status, ans := check(t, in, fmt.Sprintf(`{"checks":[{"policy":"a","key":"w%d-%d"},{"policy":"b","key":"w%d-%d"}]}`, w, i, w, i))
				if status != 200 || len(ans.Decisions) != 2 {
					t.Errorf("check: status %d, %d decisions; want 200 and 2", status, len(ans.Decisions))
					return
				}
				got := [2]int64{ans.Decisions[0].Limit, ans.Decisions[1].Limit}
				if !want[got] {
					t.Errorf("a batch saw limits a=%d b=%d: half of one policy file and half of the other", got[0], got[1])
				}
				seen[w][got]++
			}
		}()
	}
	for i := range reloads {
		writeFile(t, path, files[(i+1)%2])
		if err := in.app.Reload(context.Background()); err != nil {
			t.Fatalf("Reload %d: %v", i, err)
		}
	}
	wg.Wait()
	// The last reload put files[0] back: what follows is all of it.
	if _, ans := check(t, in, `{"checks":[{"policy":"a","key":"after"},{"policy":"b","key":"after"}]}`); len(ans.Decisions) != 2 ||
		ans.Decisions[0].Limit != 1000 || ans.Decisions[1].Limit != 2000 {
		t.Errorf("after the last reload: %+v, want a=1000 b=2000", ans.Decisions)
	}
	t.Logf("answers by policy file: %v", seen)
}

// TestReloadKeepsCountersOfUnchangedRules: a reload that changes rule b
// leaves rule a's window as it was (same keys, same count), and a rule
// whose limit rose lets a key through at once (the denials remembered
// under the old limit are not carried over).
func TestReloadKeepsCountersOfUnchangedRules(t *testing.T) {
	in, path := reloadInstance(t, policyYAML(3, 1, 3))
	for range 2 {
		if status, _ := check(t, in, `{"policy":"a","key":"k"}`); status != 200 {
			t.Fatalf("a: status %d, want 200", status)
		}
	}
	check(t, in, `{"policy":"b","key":"k"}`)
	if status, _ := check(t, in, `{"policy":"b","key":"k"}`); status != 429 {
		t.Fatalf("b over its limit of 1: status %d, want 429", status)
	}

	writeFile(t, path, policyYAML(3, 5, 3))
	if err := in.app.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	status, ans := check(t, in, `{"policy":"a","key":"k"}`)
	if status != 200 || len(ans.Decisions) != 1 || ans.Decisions[0].Remaining != 0 {
		t.Errorf("a after the reload: status %d %+v, want 200 with 0 remaining (2 spent before it, 1 now)", status, ans.Decisions)
	}
	status, ans = check(t, in, `{"policy":"b","key":"k"}`)
	if status != 200 || len(ans.Decisions) != 1 || ans.Decisions[0].Limit != 5 {
		t.Errorf("b after raising its limit to 5: status %d %+v, want 200 at limit 5", status, ans.Decisions)
	}
}

// TestReloadBadFileKeepsPolicy: a file that does not parse, or does not
// validate, is refused; the old policy stays in force and the refusal
// shows in the metric and in /ops/status until a good reload.
func TestReloadBadFileKeepsPolicy(t *testing.T) {
	in, path := reloadInstance(t, policyYAML(7, 8, 3))
	c := &cluster{instances: []*instance{in}}
	bad := map[string]string{
		"invalid": policyYAML(7, 0, 3), // limit 0 is refused by validation
		"unknown": "limits:\n  a: {algorithm: fixed_window, limt: 5, window: 1h}\n",
		"yaml":    "limits: [",
		// otp.messages is held to otp.message's rules on a reload too.
		"message without code": strings.Replace(policyYAML(7, 8, 3), "otp:\n", "otp:\n  messages: {es: \"Tu código\"}\n", 1),
		"message of no locale": strings.Replace(policyYAML(7, 8, 3), "otp:\n", "otp:\n  messages: {es-MX: \"Código {code}\"}\n", 1),
		// Not a policy: each of these once reloaded "ok" with the
		// built-in defaults in force.
		"empty":           "",
		"whitespace":      " \n\n   \n",
		"otp null":        "otp: null\n",
		"second document": policyYAML(7, 8, 3) + "---\n" + policyYAML(70, 80, 30),
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			writeFile(t, path, body)
			err := in.app.Reload(context.Background())
			if err == nil {
				t.Fatal("Reload of a bad file: no error")
			}
			if _, ans := check(t, in, `{"policy":"b","key":"x"}`); len(ans.Decisions) != 1 || ans.Decisions[0].Limit != 8 {
				t.Errorf("after the refused reload: %+v, want the old policy (b limit 8)", ans.Decisions)
			}
			if got := in.app.Policies().Limits["b"].Limit; got != 8 {
				t.Errorf("Policies().Limits[b].Limit = %d, want 8", got)
			}
			st := c.doKey(t, 0, "GET", "/ops/status", "", opsKey).json(t)
			pf, _ := st["policy_file"].(map[string]any)
			last, _ := pf["last_reload"].(map[string]any)
			if st["status"] != "degraded" || last["result"] != "error" || !strings.Contains(fmt.Sprint(last["error"]), "policy") {
				t.Errorf("/ops/status after a refused reload: status %v, last_reload %v; want degraded and result error with the reason", st["status"], last)
			}
		})
	}
	// What is not a regular file is refused without reading it: a FIFO
	// once blocked every later reload, /dev/zero filled memory.
	for name, mk := range map[string]func(string) error{
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"dev zero":  func(p string) error { return os.Symlink("/dev/zero", p) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.RemoveAll(path); err != nil {
				t.Fatal(err)
			}
			if err := mk(path); err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(path)
			done := make(chan error, 1)
			go func() { done <- in.app.Reload(context.Background()) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("Reload = %v, want a refusal naming what the path is", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Reload blocked")
			}
			if got := in.app.Policies().Limits["b"].Limit; got != 8 {
				t.Errorf("Policies().Limits[b].Limit = %d, want 8", got)
			}
		})
	}
	metrics := string(c.doKey(t, 0, "GET", "/metrics", "", "").Body)
	want := fmt.Sprintf(`otpguard_config_reload_total{result="error"} %d`, len(bad)+3)
	if !strings.Contains(metrics, want) {
		t.Errorf("metrics: want %s in\n%s", want, grepLines(metrics, "otpguard_config"))
	}

	writeFile(t, path, policyYAML(7, 9, 3))
	if err := in.app.Reload(context.Background()); err != nil {
		t.Fatalf("Reload of a good file: %v", err)
	}
	st := c.doKey(t, 0, "GET", "/ops/status", "", opsKey).json(t)
	last, _ := st["policy_file"].(map[string]any)["last_reload"].(map[string]any)
	if last["result"] != "ok" {
		t.Errorf("/ops/status after a good reload: last_reload %v, want result ok", last)
	}
	metrics = string(c.doKey(t, 0, "GET", "/metrics", "", "").Body)
	if !strings.Contains(metrics, `otpguard_config_reload_total{result="ok"} 1`) {
		t.Errorf("metrics: want otpguard_config_reload_total{result=\"ok\"} 1 in\n%s", grepLines(metrics, "otpguard_config"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
