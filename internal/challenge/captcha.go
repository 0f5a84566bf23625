package challenge

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// Captcha checks a CAPTCHA provider's token with its server-side
// siteverify API: Cloudflare Turnstile, hCaptcha and reCAPTCHA share its
// shape (POST form fields secret, response and optional remoteip -> JSON
// success, hostname, and action and score where the provider has them).
// The challenge names the provider's site key and a signed ID bound to the
// number and expiring; the client sends back "<id>.<token>" (the ID holds
// no dot; the token may).
//
// The check has two halves. Check is the ID's: its MAC and expiry, here,
// for nothing. Confirm is the token's: one siteverify call, which the send
// makes last (guard.Confirmer), after every limit that can refuse without
// it and after the solution's single use was taken, so a token goes to the
// provider at most once and otpguard's secret is never spent on a send a
// limit refuses anyway.
type Captcha struct {
	key       []byte
	verifyURL string
	secret    string
	siteKey   string
	expires   time.Duration
	hostnames []string
	action    string
	minScore  float64
	timeout   time.Duration
	calls     *ProviderCalls
	client    *http.Client
}

// Defaults of CaptchaOptions.
const (
	// DefaultCaptchaTimeout bounds one siteverify call: the providers
	// answer in well under a second, and a send waiting longer holds one
	// of the instance's in-flight slots for nothing.
	DefaultCaptchaTimeout = 2 * time.Second
	// DefaultProviderCalls is how many siteverify calls one instance has
	// under way at once, at most.
	DefaultProviderCalls = 16
)

// CaptchaOptions configure a Captcha.
type CaptchaOptions struct {
	Key       []byte // derived from otpguard's HMAC key
	VerifyURL string // e.g. https://challenges.cloudflare.com/turnstile/v0/siteverify
	Secret    string
	SiteKey   string
	Expires   time.Duration
	// Hostnames are the sites a token may have been solved on: the
	// answer's hostname must be one of them (case aside). None: no token
	// holds.
	Hostnames []string
	// Action (empty: not checked) is the action the answer must name
	// (reCAPTCHA v3's action, Turnstile's data-action).
	Action string
	// MinScore (0: none) is the least score an answer that carries one
	// may have, read as reCAPTCHA v3's: 1.0 very likely a human, 0.0 very
	// likely a bot. An answer with a score and no MinScore is the
	// provider's failure, never an allow: a score nobody reads would let
	// a bot's token through.
	MinScore float64
	// Timeout bounds one siteverify call (0: DefaultCaptchaTimeout).
	Timeout time.Duration
	// Calls bounds the siteverify calls under way at once (nil: a bound of
	// DefaultProviderCalls of its own). Give every Captcha of one process
	// the same (a policy reload builds a new Captcha), so that a hung
	// provider holds at most that many of the instance's requests.
	Calls *ProviderCalls
}

// NewCaptcha returns the CAPTCHA verifier of o. Its HTTP client follows
// no redirect: a provider that answers one has failed (a 307 would POST
// the secret to the redirect's target, and that target's success would
// be believed).
func NewCaptcha(o CaptchaOptions) *Captcha {
	if o.Timeout <= 0 {
		o.Timeout = DefaultCaptchaTimeout
	}
	if o.Calls == nil {
		o.Calls = NewProviderCalls(DefaultProviderCalls)
	}
	client := &http.Client{Timeout: o.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	hosts := make([]string, len(o.Hostnames))
	for i, h := range o.Hostnames {
		hosts[i] = strings.ToLower(h)
	}
	return &Captcha{key: o.Key, verifyURL: o.VerifyURL, secret: o.Secret, siteKey: o.SiteKey, expires: o.Expires,
		hostnames: hosts, action: o.Action, minScore: o.MinScore, timeout: o.Timeout, calls: o.Calls, client: client}
}

var (
	_ guard.Challenger = (*Captcha)(nil)
	_ guard.Confirmer  = (*Captcha)(nil)
)

// ProviderCalls bounds the calls to a provider under way at once. A call
// past the bound is not queued: it fails at once, as the provider's
// failure (503 challenge_unavailable). Each call holds one of the
// instance's in-flight slots while it waits, so a slow or hung provider
// holds at most this many of them, and the rest stay free for every other
// decision (/limits/check, verifies, sends without a challenge).
type ProviderCalls struct{ slots chan struct{} }

// NewProviderCalls returns a bound of n calls at once (at least 1).
func NewProviderCalls(n int) *ProviderCalls {
	return &ProviderCalls{slots: make(chan struct{}, max(1, n))}
}

// try takes a place, false when none is free; done gives it back.
func (p *ProviderCalls) try() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *ProviderCalls) done() { <-p.slots }

// idLen is a signed ID's bytes: expiry (8), nonce (8), MAC (16).
const idLen = 32

// Issue makes a challenge for e164: the site key and a signed ID.
func (c *Captcha) Issue(e164 string, now time.Time) (guard.Challenge, error) {
	b := make([]byte, idLen)
	binary.BigEndian.PutUint64(b, uint64(now.Add(c.expires).Unix()))
	if _, err := rand.Read(b[8:16]); err != nil {
		return guard.Challenge{}, fmt.Errorf("challenge: nonce: %w", err)
	}
	copy(b[16:], c.idMAC(b[:16], e164))
	return guard.Challenge{Type: guard.ChallengeCaptcha, SiteKey: c.siteKey, ID: base64.RawURLEncoding.EncodeToString(b)}, nil
}

func (c *Captcha) idMAC(head []byte, e164 string) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("captcha\x00" + e164 + "\x00"))
	m.Write(head)
	return m.Sum(nil)[:16]
}

// Check verifies the ID of "<id>.<token>": its MAC (the number's binding)
// and expiry. The token is Confirm's: the provider is not asked here.
func (c *Captcha) Check(_ context.Context, e164, solution, _ string, now time.Time) (guard.Solution, error) {
	id, token, ok := strings.Cut(solution, ".")
	b, err := base64.RawURLEncoding.DecodeString(id)
	if !ok || token == "" || err != nil || len(b) != idLen {
		return guard.Solution{}, bad("not <id>.<token>")
	}
	if !hmac.Equal(b[16:], c.idMAC(b[:16], e164)) {
		return guard.Solution{}, bad("issued for another number, or forged")
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(b)), 0)
	if !now.Before(exp) {
		return guard.Solution{}, bad("expired")
	}
	return guard.Solution{ID: hex.EncodeToString(b[8:24]), Expires: exp}, nil
}

// Confirm asks the provider about the token of "<id>.<token>" (Check held
// its ID): one siteverify call, within the timeout and the bound on calls
// under way. A provider that does not answer in time, answers other than
// 200 with a success boolean, redirects, or is busy with as many calls as
// the bound allows is an error (503), never an allow; a token it refuses,
// or accepts for another hostname or action or with too low a score, is
// guard.ErrBadSolution.
func (c *Captcha) Confirm(ctx context.Context, solution, clientIP string) error {
	_, token, ok := strings.Cut(solution, ".")
	if !ok || token == "" {
		return bad("not <id>.<token>")
	}
	if !c.calls.try() {
		return fmt.Errorf("challenge: siteverify: %d calls under way already", cap(c.calls.slots))
	}
	defer c.calls.done()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ans, err := c.siteverify(ctx, token, clientIP)
	if err != nil {
		return err
	}
	return c.judge(ans)
}

// answer is what siteverify says of a token.
type answer struct {
	Success    *bool    `json:"success"`
	ErrorCodes []string `json:"error-codes"`
	Hostname   string   `json:"hostname"`
	Action     *string  `json:"action"`
	Score      *float64 `json:"score"`
}

// siteverify asks the provider about token.
func (c *Captcha) siteverify(ctx context.Context, token, clientIP string) (answer, error) {
	form := url.Values{"secret": {c.secret}, "response": {token}}
	if clientIP != "" {
		form.Set("remoteip", clientIP)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.verifyURL, strings.NewReader(form.Encode()))
	if err != nil {
		return answer{}, fmt.Errorf("challenge: siteverify: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.client.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("challenge: siteverify: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A redirect lands here too: it is not followed.
		return answer{}, fmt.Errorf("challenge: siteverify: status %d", resp.StatusCode)
	}
	var out answer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil || out.Success == nil {
		return answer{}, fmt.Errorf("challenge: siteverify: unreadable answer (%v)", err)
	}
	return out, nil
}

// judge reads a provider's answer: success, then the site, the action and
// the score it names.
func (c *Captcha) judge(a answer) error {
	if !*a.Success {
		return bad("the provider refused the token: " + strings.Join(a.ErrorCodes, ","))
	}
	if a.Score != nil && c.minScore <= 0 {
		return fmt.Errorf("challenge: siteverify: the answer carries a score and no minimum is set (OTPGUARD_CAPTCHA_MIN_SCORE)")
	}
	if !slices.Contains(c.hostnames, strings.ToLower(a.Hostname)) {
		return bad(fmt.Sprintf("solved on another site (hostname %q)", a.Hostname))
	}
	if c.action != "" && (a.Action == nil || *a.Action != c.action) {
		return bad("solved for another action")
	}
	if a.Score != nil && *a.Score < c.minScore {
		return bad(fmt.Sprintf("score %.2f below %.2f", *a.Score, c.minScore))
	}
	return nil
}
