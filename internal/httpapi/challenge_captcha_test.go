package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
)

// fakeSiteverify is a CAPTCHA provider's siteverify: the token "good"
// passes on app.example, any other fails; down answers 500, answer (when
// set) is the answer to every call, and hang (when not nil) holds every
// call until it is closed. got counts the calls that reached it.
type fakeSiteverify struct {
	down   atomic.Bool
	answer atomic.Pointer[string]
	hang   chan struct{}
	got    atomic.Int64
}

func (f *fakeSiteverify) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.got.Add(1)
	if f.hang != nil {
		select {
		case <-f.hang:
		case <-r.Context().Done():
		}
		return
	}
	if f.down.Load() {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	if r.Method != http.MethodPost || r.PostFormValue("secret") != "s3cret" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if a := f.answer.Load(); a != nil {
		fmt.Fprint(w, *a)
		return
	}
	fmt.Fprintf(w, `{"success":%t,"hostname":"app.example","error-codes":[]}`, r.PostFormValue("response") == "good")
}

// captchaCluster starts two instances with otp.challenge.type captcha
// against fake, where a country's second untrusted send in an hour is
// challenged (challengePolicy(10)); tune edits the policies and the
// configuration further. Its first send spends the country's hour.
func captchaCluster(t *testing.T, fake *fakeSiteverify, tune func(*guard.Policies, *config.Config)) *cluster {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	p := challengePolicy(10)
	p.OTP.Challenge.Type = guard.ChallengeCaptcha
	c, _ := challengeCluster(t, false, p, func(cfg *config.Config) {
		cfg.Captcha.VerifyURL, cfg.Captcha.Secret, cfg.Captcha.SiteKey = srv.URL, "s3cret", "site-1"
		cfg.Captcha.Hostnames = []string{"app.example"}
		tune(&cfg.Policies, cfg)
		cfg.Policies.FillDefaults()
	})
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400300000"}`); r.Status != http.StatusOK {
		t.Fatalf("first send: %d %s", r.Status, r.Body)
	}
	return c
}

// captchaID asks for a send to phone, which is challenged, and returns
// the challenge's ID.
func captchaID(t *testing.T, c *cluster, phone string) string {
	t.Helper()
	ch := challengeOf(t, c.do(t, 1, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q}`, phone)))
	if ch.Type != "captcha" || ch.SiteKey != "site-1" || ch.ID == "" {
		t.Fatalf("challenge %+v: want captcha, the site key and an id", ch)
	}
	return ch.ID
}

// wantCalls fails unless the provider was called want times in all.
func wantCalls(t *testing.T, fake *fakeSiteverify, want int64, when string) {
	t.Helper()
	if got := fake.got.Load(); got != want {
		t.Fatalf("%s: provider calls %d, want %d", when, got, want)
	}
}

// TestCaptchaChallenge: a good token passes, a refused one gets a new
// challenge, a provider down is 503 and gives back what the send spent
// (its cooldown), and no token is put to the provider twice: sent again
// after the provider failed, it gets a new challenge.
func TestCaptchaChallenge(t *testing.T) {
	fake := &fakeSiteverify{}
	c := captchaCluster(t, fake, func(p *guard.Policies, _ *config.Config) { p.OTP.Cooldown = time.Minute })
	id := captchaID(t, c, "+447400300002")
	challengeOf(t, c.do(t, 0, "POST", "/otp/send", sendWith("+447400300002", id+".bad")))
	wantCalls(t, fake, 1, "a refused token")

	id = captchaID(t, c, "+447400300003")
	fake.down.Store(true)
	r := c.do(t, 0, "POST", "/otp/send", sendWith("+447400300003", id+".good"))
	if code := problemCode(t, r); r.Status != http.StatusServiceUnavailable || code != "challenge_unavailable" {
		t.Fatalf("provider down: %d %s, want 503 challenge_unavailable", r.Status, r.Body)
	}
	holdToSpec(t, sendWith("+447400300003", id+".good"), r)
	fake.down.Store(false)
	challengeOf(t, c.do(t, 1, "POST", "/otp/send", sendWith("+447400300003", id+".good")))
	wantCalls(t, fake, 2, "a token sent again after the provider failed")

	id = captchaID(t, c, "+447400300003") // a 428, not 429 cooldown: the failed send gave its cooldown back
	challengeOf(t, c.do(t, 1, "POST", "/otp/send", sendWith("+447400300004", id+".good")))
	if r := c.do(t, 0, "POST", "/otp/send", sendWith("+447400300003", id+".good")); r.Status != http.StatusOK {
		t.Fatalf("good token: %d %s", r.Status, r.Body)
	}
	if r := c.do(t, 1, "POST", "/otp/send", sendWith("+447400300003", id+".good")); problemCode(t, r) != "cooldown" {
		t.Fatalf("the same token again: %d %s, want 429 cooldown", r.Status, r.Body)
	}
	wantCalls(t, fake, 3, "another number's id, a good token, the same again")
	if got := c.out.SentTo("+447400300003"); got != 1 {
		t.Fatalf("SMS sent: %d, want 1", got)
	}
}

// TestCaptchaProviderAfterLimits: the provider is asked only once every
// limit that can refuse without it let the send through: sends the
// cooldown refuses, each with a challenge's token, cost no provider call.
func TestCaptchaProviderAfterLimits(t *testing.T) {
	const refused = 10
	fake := &fakeSiteverify{}
	c := captchaCluster(t, fake, func(p *guard.Policies, _ *config.Config) { p.OTP.Cooldown = time.Minute })
	ids := make([]string, refused+1)
	for i := range ids {
		ids[i] = captchaID(t, c, "+447400310001")
	}
	if r := c.do(t, 0, "POST", "/otp/send", sendWith("+447400310001", ids[0]+".good")); r.Status != http.StatusOK {
		t.Fatalf("solved send: %d %s", r.Status, r.Body)
	}
	for i, id := range ids[1:] {
		if r := c.do(t, i, "POST", "/otp/send", sendWith("+447400310001", id+".good")); problemCode(t, r) != "cooldown" {
			t.Fatalf("send %d within the cooldown: %d %s, want 429 cooldown", i+1, r.Status, r.Body)
		}
	}
	wantCalls(t, fake, 1, fmt.Sprintf("one solved send and %d the cooldown refused", refused))
}

// TestCaptchaTokenConfirmedOnce: one token sent many times at once, on
// both instances, reaches the provider once and sends one SMS.
func TestCaptchaTokenConfirmedOnce(t *testing.T) {
	const tries = 8
	fake := &fakeSiteverify{}
	c := captchaCluster(t, fake, func(p *guard.Policies, _ *config.Config) { p.OTP.PerPhone.Limit = 100 })
	body := sendWith("+447400320001", captchaID(t, c, "+447400320001")+".good")
	var ok, again atomic.Int64
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			switch r := c.do(t, i, "POST", "/otp/send", body); r.Status {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusPreconditionRequired:
				again.Add(1)
			default:
				t.Errorf("send %d: %d %s", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || again.Load() != tries-1 {
		t.Fatalf("one token sent %d times: %d sent, %d challenged again; want 1 and %d", tries, ok.Load(), again.Load(), tries-1)
	}
	wantCalls(t, fake, 1, "one token sent many times")
	if got := c.out.SentTo("+447400320001"); got != 1 {
		t.Fatalf("SMS sent: %d, want 1", got)
	}
}

// TestCaptchaAnswerHeldToSettings: success for another site, another
// action or too low a score is a refused token (a new challenge). A
// refused token keeps the number's cooldown spent (it was a try) but not
// the solved cap (nothing was sent).
func TestCaptchaAnswerHeldToSettings(t *testing.T) {
	fake := &fakeSiteverify{}
	c := captchaCluster(t, fake, func(p *guard.Policies, cfg *config.Config) {
		p.OTP.Cooldown, p.OTP.Challenge.Floor = time.Minute, 1 // one solved send this hour
		cfg.Captcha.Action, cfg.Captcha.MinScore = "otp_send", 0.5
	})
	for i, answer := range []string{
		`{"success":true,"hostname":"evil.example","action":"otp_send","score":0.9}`,
		`{"success":true,"hostname":"app.example","action":"login","score":0.9}`,
		`{"success":true,"hostname":"app.example","action":"otp_send","score":0.1}`,
	} {
		phone := fmt.Sprintf("+4474003300%02d", i+1)
		fake.answer.Store(&answer)
		ch := challengeOf(t, c.do(t, i, "POST", "/otp/send", sendWith(phone, captchaID(t, c, phone)+".good")))
		calls := fake.got.Load()
		if r := c.do(t, i, "POST", "/otp/send", sendWith(phone, ch.ID+".good")); problemCode(t, r) != "cooldown" {
			t.Fatalf("answer %s, then the new challenge's token: %d %s, want 429 cooldown", answer, r.Status, r.Body)
		}
		wantCalls(t, fake, calls, "a send the cooldown refused")
	}
	good := `{"success":true,"hostname":"app.example","action":"otp_send","score":0.9}`
	fake.answer.Store(&good)
	if r := c.do(t, 0, "POST", "/otp/send", sendWith("+447400330009", captchaID(t, c, "+447400330009")+".good")); r.Status != http.StatusOK {
		t.Fatalf("a good answer after three refused ones (solved cap 1): %d %s", r.Status, r.Body)
	}
}

// TestCaptchaHungProviderLeavesSlots: a provider that never answers holds
// at most OTPGUARD_CAPTCHA_MAX_IN_FLIGHT requests; the sends past it are
// 503 challenge_unavailable at once, and /limits/check keeps its slots.
func TestCaptchaHungProviderLeavesSlots(t *testing.T) {
	const slots, calls = 8, 2
	fake := &fakeSiteverify{hang: make(chan struct{})}
	c := captchaCluster(t, fake, func(p *guard.Policies, cfg *config.Config) {
		p.Limits = limitPolicies().Limits
		cfg.MaxInFlight, cfg.Captcha.MaxInFlight, cfg.Captcha.Timeout = slots, calls, 10*time.Second
	})
	bodies := make([]string, slots)
	for i := range bodies {
		phone := fmt.Sprintf("+4474003400%02d", i+1)
		bodies[i] = sendWith(phone, captchaID(t, c, phone)+".good")
	}
	var wg sync.WaitGroup
	var returned atomic.Int64
	defer func() { close(fake.hang); wg.Wait() }()
	for _, body := range bodies {
		wg.Go(func() {
			r := c.do(t, 0, "POST", "/otp/send", body)
			returned.Add(1)
			if r.Status != http.StatusServiceUnavailable || problemCode(t, r) != "challenge_unavailable" {
				t.Errorf("send: %d %s, want 503 challenge_unavailable", r.Status, r.Body)
			}
		})
	}
	// Every send is either back or at the provider.
	for deadline := time.Now().Add(time.Minute); fake.got.Load()+returned.Load() < slots || fake.got.Load() < calls; {
		if time.Now().After(deadline) {
			t.Fatalf("sends: %d at the provider, %d back, of %d", fake.got.Load(), returned.Load(), slots)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 10 {
		if r := c.do(t, 0, "POST", "/limits/check", `{"policy":"search","key":"user:1"}`); r.Status != http.StatusOK {
			t.Fatalf("check %d while the provider hangs: %d %s, want 200", i, r.Status, r.Body)
		}
	}
	wantCalls(t, fake, calls, "sends against a hung provider")
}
