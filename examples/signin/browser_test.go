package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/internal/browsertest"
	otpconfig "github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// solveTimes > 0 makes TestSignInPageInChromium measure the widget's solve
// time over that many challenges, unthrottled and with Chromium's CPU
// throttled 4x, and log the median and p95 (docs/abuse.md quotes them).
var solveTimes = flag.Int("solvetimes", 0, "measure the widget's solve time over this many challenges")

// challengePolicies make a new number's send meet a challenge: GB's
// country velocity floor is 1 an hour, so its second untrusted send is a
// 428, and solved sends have room (no conversion watch to cut it: the
// measuring run verifies none of its codes). No cooldown, so a replay is
// refused by the solution's single use alone; the proof of work is the
// default's.
func challengePolicies() guard.Policies {
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.PerIP.Limit = 1000
	p.OTP.CountryVelocity.Floor = 1
	p.OTP.Challenge.Floor = 500
	p.OTP.Conversion.Mode = guard.ConversionOff
	return p
}

// recorder stands between the page and the app: it keeps the solutions
// the page posts, and while hold is set answers them 503 itself, so that
// the test holds an unused solution.
type recorder struct {
	next      http.Handler
	mu        sync.Mutex
	hold      bool
	solutions []codeRequest
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/signin/code" {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var req codeRequest
		_ = json.Unmarshal(b, &req)
		if req.Altcha != "" || req.CaptchaToken != "" {
			rec.mu.Lock()
			rec.solutions = append(rec.solutions, req)
			hold := rec.hold
			rec.mu.Unlock()
			if hold {
				reply(w, http.StatusServiceUnavailable, map[string]string{"error": "held by the test"})
				return
			}
		}
	}
	rec.next.ServeHTTP(w, r)
}

func (rec *recorder) setHold(v bool) { rec.mu.Lock(); rec.hold = v; rec.mu.Unlock() }

// last is the last solution the page posted for phone.
func (rec *recorder) last(t *testing.T, phone string) codeRequest {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := len(rec.solutions) - 1; i >= 0; i-- {
		if rec.solutions[i].Phone == phone {
			return rec.solutions[i]
		}
	}
	t.Fatalf("the page posted no solution for %s", phone)
	return codeRequest{}
}

// startSignIn serves the app, behind a recorder, against otpguard at url.
func startSignIn(t *testing.T, url, captcha string) (*httptest.Server, *recorder) {
	t.Helper()
	h, err := newApp(config{OTPGuardURL: url, APIKey: otpguardtest.APIKey, Captcha: captcha}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{next: h}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return srv, rec
}

// askCode opens the page, asks for a code for phone and waits for the
// page's answer: its status state (sent, error) and text.
func askCode(t *testing.T, ctx context.Context, base, phone string) (state, text string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#phone`)),
		chromedp.SendKeys(chromedp.CSS(`#phone`), phone),
		chromedp.Click(chromedp.CSS(`#phone-form button`)),
	)
	if err != nil {
		t.Fatalf("ask a code for %s: %v", phone, err)
	}
	return pageState(t, ctx, "sent")
}

// pageState waits for the page's status to be one of states (or error).
func pageState(t *testing.T, ctx context.Context, states ...string) (state, text string) {
	t.Helper()
	type answer struct{ State, Text string }
	a, err := chromedp.Run(ctx, chromedp.PollFunction[answer](`(states) => {
	  const s = document.querySelector('#status');
	  return states.includes(s.dataset.state) && {state: s.dataset.state, text: s.textContent};
	}`, chromedp.WithPollingArgs(append(states, "error")), chromedp.WithPollingInterval(20*time.Millisecond),
		chromedp.WithPollingTimeout(90*time.Second)))
	if err != nil {
		t.Fatalf("wait for the page's answer: %v", err)
	}
	return a.State, a.Text
}

// post sends body to the app as the page does, and returns the status and
// the answer.
func post(t *testing.T, url string, body codeRequest) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := http.Post(url+"/signin/code", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("answer of %s: %v", url, err)
	}
	return res.StatusCode, out
}

// widgetPayload is what ALTCHA's widget posts for a v1 challenge.
type widgetPayload struct {
	Algorithm, Challenge, Salt, Signature string
	Number                                int64
	Took                                  *float64 // the widget's own solve time, ms
}

func decodePayload(t *testing.T, s string) widgetPayload {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	var p widgetPayload
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil {
		t.Fatalf("the widget's payload %q: %v", s, err)
	}
	return p
}

// TestSignInPageInChromium drives the example's page in headless Chromium
// against a real otpguard: a new number's send meets a 428, the page runs
// ALTCHA's real widget on the challenge the app hands it, posts the
// solution, and the app's resend is answered with a code sent; the code
// signs in. In the same run a solution posted for another number, and a
// replay of a used one, are refused (428 again, no SMS).
func TestSignInPageInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	g := otpguardtest.StartWith(t, challengePolicies(), nil)
	ctx := t.Context()
	c, err := client.New(g.URL, client.WithAPIKey(otpguardtest.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	// GB's one unchallenged send of the hour.
	if _, err := c.Send(ctx, client.SendRequest{Phone: "+447400100000"}); err != nil {
		t.Fatalf("first send: %v", err)
	}
	app, rec := startSignIn(t, g.URL, captchaTurnstile)
	limit := 4 * time.Minute
	if *solveTimes > 0 {
		limit += time.Duration(*solveTimes) * time.Minute // four modes, at most 15 s a solve
	}
	bctx := browsertest.Headless(t, exe, limit)

	// A solution held back from the app: good for its own number only.
	const held, other = "+447400100001", "+447400100002"
	rec.setHold(true)
	if state, text := askCode(t, bctx, app.URL, held); state != "error" || !strings.Contains(text, "held by the test") {
		t.Fatalf("page with the solution held: %s %q", state, text)
	}
	rec.setHold(false)
	sol := rec.last(t, held)
	if p := decodePayload(t, sol.Altcha); p.Took == nil || p.Algorithm != "SHA-256" || p.Number < 0 || p.Number > guard.DefaultChallengeMaxNumber {
		t.Errorf("payload %+v: want ALTCHA's widget's v1 payload (algorithm, number in range, took)", p)
	}
	sent := g.Outbox.Count()
	if status, out := post(t, app.URL, codeRequest{Phone: other, Altcha: sol.Altcha}); status != http.StatusPreconditionRequired || out["challenge"] == nil {
		t.Errorf("%s's solution sent for %s: %d %v, want 428 with a new challenge", held, other, status, out)
	}
	if status, out := post(t, app.URL, codeRequest{Phone: held, Altcha: sol.Altcha}); status != http.StatusOK || out["sent_to"] != held {
		t.Errorf("the held solution for its own number: %d %v, want 200 sent", status, out)
	}
	if got := g.Outbox.Count() - sent; got != 1 {
		t.Errorf("SMS sent: %d, want 1 (the other number's send refused)", got)
	}

	// The whole flow in the page.
	const phone = "+447400100003"
	state, text := askCode(t, bctx, app.URL, phone)
	if state != "sent" || text != "Code sent to "+phone+"." {
		t.Fatalf("page: %s %q, want the code sent", state, text)
	}
	if p := decodePayload(t, rec.last(t, phone).Altcha); p.Took == nil {
		t.Errorf("payload %+v: not the widget's", p)
	}
	err = chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS(`#code`), g.Outbox.LastCode(t, phone)),
		chromedp.Click(chromedp.CSS(`#code-form button`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if state, text := pageState(t, bctx, "signed-in"); state != "signed-in" {
		t.Errorf("after the code: %s %q, want signed in", state, text)
	}

	// A replay of the used solution.
	sent = g.Outbox.Count()
	if status, out := post(t, app.URL, rec.last(t, phone)); status != http.StatusPreconditionRequired || out["challenge"] == nil {
		t.Errorf("replayed solution: %d %v, want 428 with a new challenge", status, out)
	}
	if g.Outbox.Count() != sent {
		t.Errorf("the replay sent an SMS")
	}
	if *solveTimes > 0 {
		measureSolves(t, bctx, app.URL, rec, *solveTimes)
	}
}

// TestStandInCaptchaInChromium runs a captcha challenge through the page
// with the stand-in widget (no provider loads offline) and the stand-in's
// siteverify as otpguard's provider: the 428 shows the stand-in, its
// token goes back through the app as "<id>.<token>", and the code is sent.
func TestStandInCaptchaInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	siteverify := httptest.NewServer(http.HandlerFunc(standInSiteverify))
	t.Cleanup(siteverify.Close)
	pol := challengePolicies()
	pol.OTP.Challenge.Type = guard.ChallengeCaptcha
	g := otpguardtest.StartWith(t, pol, func(cfg *otpconfig.Config) {
		cfg.Captcha = otpconfig.CaptchaConfig{VerifyURL: siteverify.URL, Secret: "standin-secret", SiteKey: "standin-site-key",
			Hostnames: []string{"127.0.0.1"}, Timeout: 2 * time.Second}
	})
	c, err := client.New(g.URL, client.WithAPIKey(otpguardtest.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(t.Context(), client.SendRequest{Phone: "+447400100000"}); err != nil {
		t.Fatalf("first send: %v", err)
	}
	app, rec := startSignIn(t, g.URL, captchaStandIn)
	bctx := browsertest.Headless(t, exe, 2*time.Minute)

	const phone = "+447400100001"
	err = chromedp.Do(bctx,
		chromedp.Navigate(app.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#phone`)),
		chromedp.SendKeys(chromedp.CSS(`#phone`), phone),
		chromedp.Click(chromedp.CSS(`#phone-form button`)),
		chromedp.WaitVisible(chromedp.CSS(`.standin[data-sitekey="standin-site-key"] #standin-confirm`)),
		chromedp.Click(chromedp.CSS(`#standin-confirm`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if state, text := pageState(t, bctx, "sent"); state != "sent" || text != "Code sent to "+phone+"." {
		t.Fatalf("page: %s %q, want the code sent", state, text)
	}
	if sol := rec.last(t, phone); sol.CaptchaID == "" || !strings.HasPrefix(sol.CaptchaToken, "standin-pass-") {
		t.Errorf("the page posted %+v, want the challenge's ID and the stand-in's token", sol)
	}
	if g.Outbox.Count() != 2 {
		t.Errorf("SMS sent: %d, want 2", g.Outbox.Count())
	}
}
