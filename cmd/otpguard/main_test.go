package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// program is otpguard's run() going in the background, its stdout read
// line by line.
type program struct {
	lines chan map[string]any
	done  chan error
	url   string
	key   string
	// opsKey is OTPGUARD_OPS_KEYS, or the key embedded mode generated.
	opsKey string
	cancel context.CancelFunc
	// stopped is set once stop has read run's result from done.
	stopped bool
	err     error
}

// stop cancels run's context (SIGTERM) and returns what run returned, or
// fails the test when it has not returned within within.
func (p *program) stop(t *testing.T, within time.Duration) error {
	t.Helper()
	if p.stopped {
		return p.err
	}
	p.cancel()
	select {
	case p.err = <-p.done:
		p.stopped = true
	case <-time.After(within):
		t.Fatalf("run did not return within %s of cancel", within)
	}
	return p.err
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// boot runs the real program on port 0 and waits until it listens.
func boot(t *testing.T, vars map[string]string) *program {
	t.Helper()
	vars["OTPGUARD_ADDR"] = "127.0.0.1:0"
	if _, ok := vars["OTPGUARD_DATA_DIR"]; !ok {
		vars["OTPGUARD_DATA_DIR"] = t.TempDir()
	}
	if _, ok := vars["OTPGUARD_SMS"]; !ok { // the tests read the codes the console sender prints
		vars["OTPGUARD_SMS"] = "console"
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	p := &program{lines: make(chan map[string]any, 1000), done: make(chan error, 1), cancel: cancel}
	go func() {
		err := run(ctx, []string{"otpguard"}, env(vars), pw)
		pw.Close()
		p.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.lines <- m
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		if p.stopped { // the test stopped it and checked the result
			return
		}
		if err := p.stop(t, 20*time.Second); err != nil {
			t.Errorf("run returned %v after shutdown, want nil", err)
		}
	})
	p.key = vars["OTPGUARD_API_KEYS"]
	p.opsKey = vars["OTPGUARD_OPS_KEYS"]
	for p.url == "" {
		m := p.next(t)
		if k, ok := m["api_key"].(string); ok {
			p.key = k
		}
		if k, ok := m["ops_key"].(string); ok {
			p.opsKey = k
		}
		if m["msg"] == "listening" {
			p.url = m["url"].(string)
		}
	}
	return p
}

func (p *program) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m, ok := <-p.lines:
		if !ok {
			t.Fatalf("program stopped: %v", <-p.done)
		}
		return m
	case err := <-p.done:
		t.Fatalf("program stopped: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatalf("no output for 15s")
	}
	return nil
}

// sms waits for the console sender's line to phone and returns its code.
func (p *program) sms(t *testing.T, phone string) string {
	t.Helper()
	for {
		m := p.next(t)
		if m["to"] == phone {
			return regexp.MustCompile(`\d{6}`).FindString(m["body"].(string))
		}
	}
}

// call sends a request to the program with key as bearer ("" for none)
// and decodes the JSON answer.
func (p *program) call(t *testing.T, method, path, body, key string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m) // an answer without a JSON body leaves m nil; callers check the status
	return res.StatusCode, m
}

// post sends body with the program's API key.
func (p *program) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	return p.call(t, "POST", path, body, p.key)
}

func walkThrough(t *testing.T, p *program) {
	t.Helper()
	status, body := p.post(t, "/otp/send", `{"phone":"+91 98000 00000","client_ip":"203.0.113.7"}`)
	if status != 200 || body["phone"] != "+919800000000" {
		t.Fatalf("send: %d %v", status, body)
	}
	code := p.sms(t, "+919800000000")
	if status, body := p.post(t, "/otp/verify", `{"phone":"+919800000000","code":"`+code+`"}`); status != 200 || body["valid"] != true {
		t.Fatalf("verify: %d %v", status, body)
	}
	if status, body := p.post(t, "/otp/send", `{"phone":"+919800000000"}`); status != 429 || body["code"] != "cooldown" {
		t.Fatalf("second send: %d %v, want 429 cooldown", status, body)
	}
	if status, body := p.post(t, "/limits/check", `{"policy":"default","key":"user:42"}`); status != 200 || body["allowed"] != true {
		t.Fatalf("limits: %d %v", status, body)
	}
}

func TestEmbeddedDefaults(t *testing.T) {
	p := boot(t, map[string]string{})
	if !strings.HasPrefix(p.key, "ogk_") {
		t.Fatalf("embedded mode printed no generated API key (got %q)", p.key)
	}
	walkThrough(t, p)
}

func TestRealRedis(t *testing.T) {
	tg := redistest.New(t)
	p := boot(t, map[string]string{
		"OTPGUARD_REDIS_URL":     tg.URL,
		"OTPGUARD_REDIS_PREFIX":  tg.Prefix,
		"OTPGUARD_REDIS_TIMEOUT": "2s",
		"OTPGUARD_API_KEYS":      "e2e-key-0123456789abcdef",
		"OTPGUARD_HMAC_KEY":      "0123456789abcdef0123456789abcdef",
	})
	walkThrough(t, p)
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		want []string // every one must appear in the error
	}{
		{"redis without keys", map[string]string{"OTPGUARD_REDIS_URL": "redis://127.0.0.1:1/0"},
			[]string{"OTPGUARD_API_KEYS", "OTPGUARD_HMAC_KEY"}},
		{"bad timeout", map[string]string{"OTPGUARD_REDIS_TIMEOUT": "fast"}, []string{"OTPGUARD_REDIS_TIMEOUT"}},
		{"unknown sms", map[string]string{"OTPGUARD_SMS": "pigeon"}, []string{"OTPGUARD_SMS"}},
		{"twilio without account", map[string]string{"OTPGUARD_SMS": "twilio"}, []string{"TWILIO_ACCOUNT_SID"}},
		{"secret twice", map[string]string{"OTPGUARD_HMAC_KEY": "x", "OTPGUARD_HMAC_KEY_FILE": "/nope"}, []string{"OTPGUARD_HMAC_KEY"}},
		{"bad policy values", map[string]string{"OTPGUARD_CONFIG": write("bad.yaml", `
otp:
  code_length: 4
  code_ttl: 20m
  per_phone: {limit: 0, window: 10m}
limits:
  api: {algorithm: leaky, capacity: 5}
  search: {algorithm: fixed_window, limit: 10, window: 0s}
`)}, []string{"otp.code_length", "otp.code_ttl", "otp.per_phone.limit", "limits.api.algorithm", "limits.search.window"}},
		{"misspelt field", map[string]string{"OTPGUARD_CONFIG": write("typo.yaml", "otp:\n  per_phon: {limit: 3}\n")}, []string{"per_phon"}},
		{"bad duration", map[string]string{"OTPGUARD_CONFIG": write("dur.yaml", "limits:\n  api:\n    algorithm: fixed_window\n    limit: 10\n    window: 1mm\n")},
			[]string{"line 5", `"1mm" is not a duration`}},
		{"bad number", map[string]string{"OTPGUARD_CONFIG": write("num.yaml", "otp:\n  per_phone: {limit: many}\n")}, []string{"line 2", "many"}},
		{"missing file", map[string]string{"OTPGUARD_CONFIG": filepath.Join(dir, "nope.yaml")}, []string{"OTPGUARD_CONFIG"}},
		// docs/reference.md's table of configuration mistakes: each is answered by
		// config check, before serve would meet it.
		{"shared redis, no sender chosen", map[string]string{"OTPGUARD_REDIS_URL": "redis://127.0.0.1:1/0",
			"OTPGUARD_API_KEYS": "e2e-key-0123456789abcdef", "OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef"},
			[]string{"OTPGUARD_SMS: required with a shared Redis: set twilio", "or console"}},
		{"UK is not a region", map[string]string{"OTPGUARD_CONFIG": write("uk.yaml", "otp:\n  allowed_countries: [IN, UK]\n")},
			[]string{`otp.allowed_countries[1]: "UK" is not a region code libphonenumber knows: use "GB"`}},
		{"unknown per-country code", map[string]string{"OTPGUARD_CONFIG": write("pc.yaml", "otp:\n  per_country:\n    XY: {limit: 5, window: 1h}\n")},
			[]string{`otp.per_country.XY: "XY" is not a region code`}},
		{"misspelt field named by path", map[string]string{"OTPGUARD_CONFIG": write("cd.yaml", "otp:\n  cooldwon: 30s\n")},
			[]string{"line 2: otp.cooldwon: unknown field (did you mean cooldown?)"}},
		{"listen address without a port", map[string]string{"OTPGUARD_ADDR": "localhost"}, []string{`OTPGUARD_ADDR: "localhost" is not host:port`}},
		{"listen port out of range", map[string]string{"OTPGUARD_ADDR": ":99999"}, []string{"OTPGUARD_ADDR", "0 to 65535"}},
		{"profiles offered to the network", map[string]string{"OTPGUARD_DEBUG_ADDR": "0.0.0.0:6060"},
			[]string{`OTPGUARD_DEBUG_ADDR: "0.0.0.0:6060": the profiles have no authentication: listen on loopback`}},
		{"redis URL of another scheme", map[string]string{"OTPGUARD_REDIS_URL": "http://user:s3cret@10.0.0.1:6379",
			"OTPGUARD_API_KEYS": "e2e-key-0123456789abcdef", "OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_SMS": "console"},
			[]string{"OTPGUARD_REDIS_URL: not a redis:// or rediss:// URL"}},
		{"database URL of another scheme", map[string]string{"OTPGUARD_DATABASE_URL": "mysql://root:s3cret@db/otpguard"},
			[]string{`OTPGUARD_DATABASE_URL: unsupported scheme "mysql"`}},
		{"database URL pgx cannot read", map[string]string{"OTPGUARD_DATABASE_URL": "postgres://otpguard:s3cret@db:port/otpguard"},
			[]string{"OTPGUARD_DATABASE_URL: not a PostgreSQL URL"}},
		{"api keys file missing", map[string]string{"OTPGUARD_API_KEYS_FILE": filepath.Join(dir, "no-keys")}, []string{"OTPGUARD_API_KEYS_FILE"}},
		{"ops keys twice", map[string]string{"OTPGUARD_OPS_KEYS": "ops-key-0123456789abcdef", "OTPGUARD_OPS_KEYS_FILE": "/run/secrets/ops"},
			[]string{"OTPGUARD_OPS_KEYS and OTPGUARD_OPS_KEYS_FILE: set one, not both"}},
		{"reCAPTCHA without a minimum score", captchaVars(write("rc.yaml", "otp:\n  challenge: {type: captcha}\n"),
			"https://www.google.com/recaptcha/api/siteverify", "OTPGUARD_CAPTCHA_HOSTNAMES", "example.com"),
			[]string{"OTPGUARD_CAPTCHA_MIN_SCORE: required with reCAPTCHA (www.google.com)"}},
		{"CAPTCHA without the sites its tokens come from", captchaVars(write("cf.yaml", "otp:\n  challenge: {type: captcha}\n"),
			"https://challenges.cloudflare.com/turnstile/v0/siteverify"),
			[]string{"otp.challenge.type captcha needs OTPGUARD_CAPTCHA_HOSTNAMES"}},
		{"twilio callback not a URL", map[string]string{"OTPGUARD_SMS": "twilio", "TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef",
			"TWILIO_AUTH_TOKEN": "token", "TWILIO_FROM": "+14155550100", "TWILIO_STATUS_CALLBACK_URL": "otpguard.example/sms/status"},
			[]string{"sms: twilio: status callback"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), []string{"otpguard", "config", "check"}, env(tc.vars), io.Discard)
			if err == nil {
				t.Fatalf("config check passed, want an error naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q shows the URL's password", err)
				}
			}
		})
	}
}

// captchaVars are the settings of a CAPTCHA provider at verifyURL, the
// policy file at policies, and more (name, value pairs).
func captchaVars(policies, verifyURL string, more ...string) map[string]string {
	vars := map[string]string{"OTPGUARD_CONFIG": policies, "OTPGUARD_CAPTCHA_VERIFY_URL": verifyURL,
		"OTPGUARD_CAPTCHA_SECRET": "s3cret", "OTPGUARD_CAPTCHA_SITE_KEY": "site-1"}
	for i := 0; i+1 < len(more); i += 2 {
		vars[more[i]] = more[i+1]
	}
	return vars
}

func TestConfigCheckPrintsPolicies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("otp:\n  cooldown: 45s\nlimits:\n  search: {algorithm: fixed_window, limit: 300, window: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"otpguard", "config", "check"}, env(map[string]string{"OTPGUARD_CONFIG": path}), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cooldown: 45s", "search:", "on_store_error: open", "code_length: 6"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config check output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"otpguard", "version"}, env(nil), &out); err != nil || !strings.HasPrefix(out.String(), "otpguard "+app.Release+" (commit ") {
		t.Errorf("version: %q, %v", out.String(), err)
	}
	if err := run(context.Background(), []string{"otpguard", "frobnicate"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("unknown command: %v", err)
	}
}

func TestSyncModeThroughTheBinary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("limits:\n  partner: {algorithm: fixed_window, limit: 100, window: 1m, mode: sync, sync_interval: 50ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := boot(t, map[string]string{"OTPGUARD_CONFIG": path})
	status, body := p.post(t, "/limits/check", `{"policy":"partner","key":"p1","cost":1}`)
	if status != 200 {
		t.Fatalf("sync-mode check: %d %v", status, body)
	}
	if d := body["decisions"].([]any)[0].(map[string]any); d["mode"] != "sync" {
		t.Fatalf("decision %v, want mode sync", d)
	}
}

// TestStartsWhileRedisIsDown: an instance restarted during an outage comes
// up and serves each policy by its on_store_error.
func TestStartsWhileRedisIsDown(t *testing.T) {
	p := boot(t, map[string]string{
		"OTPGUARD_REDIS_URL": redistest.RefusedURL(t),
		"OTPGUARD_API_KEYS":  "e2e-key-0123456789abcdef",
		"OTPGUARD_HMAC_KEY":  "0123456789abcdef0123456789abcdef",
	})
	if status, body := p.post(t, "/limits/check", `{"policy":"default","key":"k"}`); status != 200 {
		t.Fatalf("open policy without Redis: %d %v, want 200 from the split limit", status, body)
	}
	if status, body := p.post(t, "/otp/send", `{"phone":"+919800000000"}`); status != 503 || body["code"] != "store_unavailable" {
		t.Fatalf("closed OTP without Redis: %d %v, want 503 store_unavailable", status, body)
	}
}

// TestEmbeddedRedisKeepsTime: the embedded Redis expires keys and refills
// buckets in real time (miniredis does neither unless driven). A refusal
// is looked for only while it must hold: on a machine too busy to ask
// again within the cooldown (or the bucket's 250ms) the try proves
// nothing and is made again on another key; a Redis that keeps no limit
// fails every try.
func TestEmbeddedRedisKeepsTime(t *testing.T) {
	t.Parallel() // its own embedded Redis and data directory
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("otp:\n  cooldown: 1s\nlimits:\n  fast: {algorithm: token_bucket, capacity: 1, refill_per_second: 4}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := boot(t, map[string]string{"OTPGUARD_CONFIG": path})
	// refused asks twice within d, on try's own key: the first must be
	// allowed, the second refused while d has not passed.
	refused := func(what string, d time.Duration, ask func(try int) (int, map[string]any)) (try int) {
		t.Helper()
		for try = 0; ; try++ {
			start := time.Now()
			if status, body := ask(try); status != 200 {
				t.Fatalf("%s, try %d: first call %d %v, want 200", what, try, status, body)
			}
			status, body := ask(try)
			if status == 429 {
				return try
			}
			if time.Since(start) < d || try == 4 {
				t.Fatalf("%s, try %d: second call %d %v, want 429 within %s", what, try, status, body, d)
			}
		}
	}
	phone := func(try int) string { return fmt.Sprintf(`{"phone":"+9198000000%02d"}`, try) }
	try := refused("send within the 1s cooldown", time.Second, func(try int) (int, map[string]any) {
		return p.post(t, "/otp/send", phone(try))
	})
	time.Sleep(1200 * time.Millisecond)
	if status, body := p.post(t, "/otp/send", phone(try)); status != 200 {
		t.Fatalf("send after the 1s cooldown: %d %v, want 200 (the embedded Redis must expire keys)", status, body)
	}
	check := func(try int) (int, map[string]any) {
		return p.post(t, "/limits/check", fmt.Sprintf(`{"policy":"fast","key":"k%d"}`, try))
	}
	try = refused("bucket of 1 at 4/s", 250*time.Millisecond, check)
	time.Sleep(400 * time.Millisecond) // 4 tokens a second
	if got, body := check(try); got != 200 {
		t.Fatalf("after 400ms at 4/s: %d %v, want 200 (the bucket must refill)", got, body)
	}
}

// TestUnknownSettingWarned: a misspelt OTPGUARD_ variable is not silently
// ignored: config check names it and the setting that was probably meant.
func TestUnknownSettingWarned(t *testing.T) {
	saved := environ
	t.Cleanup(func() { environ = saved })
	environ = func() []string {
		return []string{"PATH=/bin", "OTPGUARD_SMS=console", "OTPGUARD_REDIS_TIMOUT=5ms", "OTPGUARD_TEST_REDIS_URL=x",
			"OTPGUARD_FROBNICATE=1", "OTPGUARD_HMAC_KEY_FILE=/run/secrets/hmac"}
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"otpguard", "config", "check"}, env(map[string]string{"OTPGUARD_SMS": "console"}), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# warning: OTPGUARD_REDIS_TIMOUT is not an otpguard setting and is ignored (did you mean OTPGUARD_REDIS_TIMEOUT?)\n",
		"# warning: OTPGUARD_FROBNICATE is not an otpguard setting and is ignored\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config check output lacks %q:\n%s", want, out.String())
		}
	}
	for _, known := range []string{"OTPGUARD_SMS ", "OTPGUARD_TEST_REDIS_URL", "OTPGUARD_HMAC_KEY_FILE", "PATH"} {
		if strings.Contains(out.String(), known) {
			t.Errorf("config check warns of %s, which is known:\n%s", known, out.String())
		}
	}
}

// TestDebugListener: OTPGUARD_DEBUG_ADDR serves Go's runtime profiles on a
// listener of their own; the API's listener does not offer them.
func TestDebugListener(t *testing.T) {
	p := boot(t, map[string]string{"OTPGUARD_DEBUG_ADDR": "127.0.0.1:0"})
	var debugURL string
	for debugURL == "" {
		m := p.next(t)
		if strings.HasPrefix(fmt.Sprint(m["msg"]), "debug listener") {
			debugURL, _ = m["url"].(string)
		}
	}
	for _, c := range []struct {
		url  string
		want int
	}{
		{debugURL + "cmdline", http.StatusOK},
		{debugURL + "goroutine?debug=1", http.StatusOK},
		{p.url + "/debug/pprof/cmdline", http.StatusNotFound},
	} {
		res, err := http.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("GET %s: %d, want %d (%.200s)", c.url, res.StatusCode, c.want, body)
		}
	}
}

// TestConfigCheckWarnsAsServeDoes: with a shared Redis, config check
// prints the warnings serve logs at start-up - no ops keys (the ops desk
// refuses everyone), no database URL (a local SQLite file each instance
// keeps to itself) - rather than only "valid"; set, neither is said.
func TestConfigCheckWarnsAsServeDoes(t *testing.T) {
	shared := map[string]string{"OTPGUARD_REDIS_URL": "redis://127.0.0.1:1/0", "OTPGUARD_SMS": "console",
		"OTPGUARD_API_KEYS": "e2e-key-0123456789abcdef", "OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef",
		"OTPGUARD_DATA_DIR": t.TempDir()}
	warnings := []string{
		"# warning: no OTPGUARD_OPS_KEYS set: the ops page and /ops API refuse everyone\n",
		"# warning: ops database is a local SQLite file: instances do not share the deny-list or the audit trail; set OTPGUARD_DATABASE_URL (PostgreSQL) when running several\n",
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"otpguard", "config", "check"}, env(shared), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range warnings {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config check output lacks %q:\n%s", want, out.String())
		}
	}
	shared["OTPGUARD_OPS_KEYS"] = "ops-key-0123456789abcdef"
	shared["OTPGUARD_DATABASE_URL"] = "postgres://otpguard@127.0.0.1:5432/otpguard"
	out.Reset()
	if err := run(context.Background(), []string{"otpguard", "config", "check"}, env(shared), &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "# warning:") {
		t.Errorf("with ops keys and a database URL config check still warns:\n%s", out.String())
	}
}
