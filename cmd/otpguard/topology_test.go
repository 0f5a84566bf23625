package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// process is one otpguard binary running as its own OS process.
type process struct {
	cmd *exec.Cmd
	url string
}

// buildBinary builds otpguard once into the test's temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "otpguard")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts the binary on a port of its choosing and reads the
// port from its "listening" log line.
func startProcess(t *testing.T, bin string, vars map[string]string) *process {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "OTPGUARD_ADDR=127.0.0.1:0", "OTPGUARD_DATA_DIR="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd}
	t.Cleanup(func() { p.kill() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "listening" {
				urls <- m["url"].(string)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p.url = <-urls:
	case <-time.After(20 * time.Second):
		t.Fatalf("otpguard process did not listen within 20s")
	}
	return p
}

// kill ends the process at once, as a crash or an OOM kill would.
func (p *process) kill() {
	if p.cmd.Process != nil && p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// TestEightProcessesOneRedis is the production topology: 8 otpguard
// processes on one Redis behind a round-robin balancer. A burst of
// concurrent OTP sends for one number and limit checks for one key is
// exact; killing 2 processes drops the live-instance count the others see
// from 8 to 6 within seconds.
func TestEightProcessesOneRedis(t *testing.T) {
	t.Parallel() // its own binary, Redis (or key prefix) and processes
	const n = 8
	tg := redistest.New(t)
	bin := buildBinary(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("otp:\n  cooldown: 0s\n  per_phone: {limit: 3, window: 10m}\n"+
		"limits:\n  api: {algorithm: fixed_window, limit: 40, window: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const apiKey, opsKey = "topology-api-key-0123456789", "topology-ops-key-0123456789"
	vars := map[string]string{
		"OTPGUARD_REDIS_URL": tg.URL, "OTPGUARD_REDIS_PREFIX": tg.Prefix,
		"OTPGUARD_REDIS_TIMEOUT": "2s", // exactness under load, not an outage test
		"OTPGUARD_API_KEYS":      apiKey, "OTPGUARD_OPS_KEYS": opsKey,
		"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_SMS": "console",
		"OTPGUARD_CONFIG": policy,
	}
	procs := make([]*process, n)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { procs[i] = startProcess(t, bin, vars) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The load balancer: round robin over the processes still alive.
	var next atomic.Int64
	var alive atomic.Pointer[[]*process]
	alive.Store(&procs)
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body, key string) (int, map[string]any) {
		ps := *alive.Load()
		p := ps[int(next.Add(1))%len(ps)]
		req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, path, err)
			return 0, nil
		}
		defer res.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	instances := func() int {
		_, m := do("GET", "/ops/status", "", opsKey)
		v, _ := m["instances"].(float64)
		return int(v)
	}
	waitInstances := func(want int, within time.Duration) time.Duration {
		start := time.Now()
		for {
			got := instances()
			if got == want {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("live instances seen by the others = %d after %s, want %d", got, within, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitInstances(n, 10*time.Second)

	const sends, checks = 200, 300
	statuses := map[string]map[int]int{"send": {}, "check": {}}
	var mu sync.Mutex
	start := make(chan struct{})
	for i := range sends + checks {
		wg.Go(func() {
			<-start
			kind, status := "send", 0
			if i < sends {
				status, _ = do("POST", "/otp/send", `{"phone":"+919800000000"}`, apiKey)
			} else {
				kind = "check"
				status, _ = do("POST", "/limits/check", `{"policy":"api","key":"user:42"}`, apiKey)
			}
			mu.Lock()
			statuses[kind][status]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if s := statuses["send"]; s[200] != 3 || s[429] != sends-3 {
		t.Errorf("%d concurrent sends to one number over %d processes: %v, want exactly 3 x 200, the rest 429", sends, n, s)
	}
	if s := statuses["check"]; s[200] != 40 || s[429] != checks-40 {
		t.Errorf("%d concurrent checks of one key over %d processes: %v, want exactly 40 x 200, the rest 429", checks, n, s)
	}
	t.Logf("burst over %d processes: sends %v, checks %v", n, statuses["send"], statuses["check"])

	procs[0].kill()
	procs[1].kill()
	rest := procs[2:]
	alive.Store(&rest)
	took := waitInstances(n-2, 10*time.Second)
	t.Logf("killed 2 of %d processes (SIGKILL): the others counted %d live instances after %s", n, n-2, took.Round(100*time.Millisecond))
}
