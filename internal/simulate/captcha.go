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
	"net"
	"net/http"
	"sync"
	"time"
)

// The settings the instances are given for the fake provider.
const (
	captchaHost    = "simulate.invalid" // the site every token is solved on
	captchaSecret  = "simulate-captcha-secret"
	captchaSiteKey = "simulate-site-key"
)

// captchaProvider is the fake siteverify.
type captchaProvider struct {
	srv    *http.Server
	url    string
	mu     sync.Mutex
	tokens map[string]bool // made by the solver, not yet verified
	made   int
}

// newCaptchaProvider starts the provider on a free port of the loopback.
func newCaptchaProvider() (*captchaProvider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simulate: the fake CAPTCHA provider: %w", err)
	}
	c := &captchaProvider{tokens: map[string]bool{}, url: "http://" + ln.Addr().String() + "/siteverify"}
	c.srv = &http.Server{Handler: http.HandlerFunc(c.siteverify), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(ln) }() // ends with Close
	return c, nil
}

// verifyURL is the provider's siteverify (OTPGUARD_CAPTCHA_VERIFY_URL).
func (c *captchaProvider) verifyURL() string { return c.url }

func (c *captchaProvider) Close() { _ = c.srv.Close() }

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
