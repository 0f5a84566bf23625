package simulate

// The CAPTCHA provider, faked (docs/simulate.md, "Trust, account and
// challenges"): a siteverify on a local HTTP server, which every instance
// is configured to ask (OTPGUARD_CAPTCHA_*) as it would ask Turnstile, so
// that a policy with otp.challenge.type captcha runs through the service's
// real CAPTCHA code, and a farm that solves every challenge can be
// measured. It accepts, once each, the tokens the simulated solver made.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
)

// The settings the instances are given for the fake provider.
const (
	captchaHost    = "simulate.invalid" // the site every token is solved on
	captchaSecret  = "simulate-captcha-secret"
	captchaSiteKey = "simulate-site-key"
)

// captchaProvider is the fake siteverify.
type captchaProvider struct {
	srv    *httptest.Server
	mu     sync.Mutex
	tokens map[string]bool // made by the solver, not yet verified
	made   int
}

func newCaptchaProvider() *captchaProvider {
	c := &captchaProvider{tokens: map[string]bool{}}
	c.srv = httptest.NewServer(http.HandlerFunc(c.siteverify))
	return c
}

// verifyURL is the provider's siteverify (OTPGUARD_CAPTCHA_VERIFY_URL).
func (c *captchaProvider) verifyURL() string { return c.srv.URL + "/siteverify" }

func (c *captchaProvider) Close() { c.srv.Close() }

// token is a token the solver made: one widget solved.
func (c *captchaProvider) token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.made++
	t := fmt.Sprintf("simulated-token-%d", c.made)
	c.tokens[t] = true
	return t
}

// siteverify answers as Turnstile does: success for a token the solver
// made, on the simulated site, once; success false for any other token
// or a wrong secret.
func (c *captchaProvider) siteverify(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	token := req.PostForm.Get("response")
	ok := req.PostForm.Get("secret") == captchaSecret && c.tokens[token]
	delete(c.tokens, token)
	c.mu.Unlock()
	ans := map[string]any{"success": ok, "hostname": captchaHost}
	if !ok {
		ans = map[string]any{"success": false, "error-codes": []string{"invalid-input-response"}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}
