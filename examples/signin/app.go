package main

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/client"
)

// static is the page, its script and the vendored widget
// (static/altcha: ALTCHA's bundle, unmodified, under its own licence).
//
//go:embed static
var static embed.FS

// The widgets a captcha challenge can be shown with.
const (
	captchaTurnstile = "turnstile" // Cloudflare Turnstile, loaded from Cloudflare
	captchaStandIn   = "standin"   // an offline stand-in: no provider, no protection
)

// config is what the app needs to reach otpguard.
type config struct {
	OTPGuardURL string
	APIKey      string
	// Captcha is the widget the page shows for a captcha challenge.
	Captcha string
}

func configFrom(getenv func(string) string) (config, error) {
	c := config{OTPGuardURL: getenv("OTPGUARD_URL"), APIKey: getenv("OTPGUARD_API_KEY"), Captcha: getenv("SIGNIN_CAPTCHA")}
	if c.OTPGuardURL == "" {
		c.OTPGuardURL = "http://127.0.0.1:8080"
	}
	if c.APIKey == "" {
		return c, errors.New("set OTPGUARD_API_KEY (otpguard prints one at start-up in embedded mode)")
	}
	switch c.Captcha {
	case "":
		c.Captcha = captchaTurnstile
	case captchaTurnstile, captchaStandIn:
	default:
		return c, fmt.Errorf("SIGNIN_CAPTCHA=%q: want %s or %s", c.Captcha, captchaTurnstile, captchaStandIn)
	}
	return c, nil
}

// newApp wires the routes: the page and its files, the two steps of a
// sign-in, and (with SIGNIN_CAPTCHA=standin) the stand-in's siteverify.
func newApp(cfg config, log *slog.Logger) (http.Handler, error) {
	c, err := client.New(cfg.OTPGuardURL, client.WithAPIKey(cfg.APIKey), client.WithUserAgent("signin-example"))
	if err != nil {
		return nil, err
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	a := &handlers{otp: c, captcha: cfg.Captcha, log: log}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", http.FileServerFS(files))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(files)))
	mux.HandleFunc("POST /signin/code", a.sendCode)
	mux.HandleFunc("POST /signin/verify", a.verifyCode)
	if cfg.Captcha == captchaStandIn {
		mux.HandleFunc("POST /standin/siteverify", standInSiteverify)
	}
	return mux, nil
}

type handlers struct {
	otp     *client.Client
	captcha string
	log     *slog.Logger
}

// codeRequest is what the page posts: the number, and with a resend the
// solution of the challenge it was handed (one of the two kinds).
type codeRequest struct {
	Phone string `json:"phone"`
	// Altcha is the payload of ALTCHA's widget (base64 of its JSON), sent
	// to otpguard as it is.
	Altcha string `json:"altcha,omitempty"`
	// CaptchaID and CaptchaToken are a captcha challenge's ID and the
	// provider's token.
	CaptchaID    string `json:"captcha_id,omitempty"`
	CaptchaToken string `json:"captcha_token,omitempty"`
	Code         string `json:"code,omitempty"`
}

// sendCode: POST /signin/code. Asks otpguard for a code; a 428 hands the
// challenge to the page, which posts here again with its solution.
func (a *handlers) sendCode(w http.ResponseWriter, r *http.Request) {
	var req codeRequest
	if !decode(w, r, &req) || req.Phone == "" {
		reply(w, http.StatusBadRequest, map[string]string{"error": "send {\"phone\": \"+...\"}"})
		return
	}
	send := client.SendRequest{Phone: req.Phone, ClientIP: clientIP(r)}
	switch {
	case req.Altcha != "":
		send.Challenge = req.Altcha
	case req.CaptchaID != "" && req.CaptchaToken != "":
		send.Challenge = (&client.Challenge{ID: req.CaptchaID}).CaptchaSolution(req.CaptchaToken)
	}
	res, err := a.otp.Send(r.Context(), send)
	if ch, ok := client.ChallengeOf(err); ok {
		a.challenge(w, ch)
		return
	}
	if err != nil {
		a.refused(w, err)
		return
	}
	reply(w, http.StatusOK, map[string]any{"status": "sent", "sent_to": res.Phone, "expires_in": res.ExpiresIn})
}

// challenge answers 428 with what the page's widget needs, and nothing
// else: ALTCHA's challenge as the widget reads it (its v1 fields), or the
// provider's site key and the challenge's ID.
func (a *handlers) challenge(w http.ResponseWriter, ch *client.Challenge) {
	body := map[string]any{"error": "one more step: show that you are not a robot"}
	switch ch.Type {
	case "pow":
		body["widget"] = "altcha"
		body["challenge"] = map[string]any{"algorithm": ch.Algorithm, "challenge": ch.Challenge, "salt": ch.Salt,
			"maxnumber": ch.MaxNumber, "signature": ch.Signature}
	case "captcha":
		body["widget"] = a.captcha
		body["challenge"] = map[string]any{"site_key": ch.SiteKey, "id": ch.ID}
	default:
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": "cannot send a code now", "reason": "challenge " + ch.Type})
		return
	}
	reply(w, http.StatusPreconditionRequired, body)
}

// verifyCode: POST /signin/verify.
func (a *handlers) verifyCode(w http.ResponseWriter, r *http.Request) {
	var req codeRequest
	if !decode(w, r, &req) || req.Phone == "" || req.Code == "" {
		reply(w, http.StatusBadRequest, map[string]string{"error": "send {\"phone\": \"+...\", \"code\": \"...\"}"})
		return
	}
	if _, err := a.otp.Verify(r.Context(), client.VerifyRequest{Phone: req.Phone, Code: req.Code}); err != nil {
		a.refused(w, err)
		return
	}
	reply(w, http.StatusOK, map[string]any{"signed_in": true})
}

// refused answers otpguard's refusal in the app's own words, passing on
// when to try again; otpguard's own text stays in the app's log.
func (a *handlers) refused(w http.ResponseWriter, err error) {
	var e *client.Error
	switch {
	case client.IsUnavailable(err) || !errors.As(err, &e):
		a.log.Warn("otpguard gave no decision", "err", err)
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": "sign-in codes are unavailable; try again shortly"})
		return
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	switch e.Code {
	case client.CodeWrongCode, client.CodeNoActiveCode, client.CodeTooManyAttempts:
		reply(w, http.StatusUnauthorized, map[string]string{"error": "that code did not work", "reason": e.Code})
	case client.CodeInvalidPhone:
		reply(w, http.StatusUnprocessableEntity, map[string]string{"error": "that is not a phone number we can send to", "reason": e.Code})
	case client.CodeCooldown:
		reply(w, http.StatusTooManyRequests, map[string]string{"error": "a code was sent a moment ago; wait before asking again", "reason": e.Code})
	default:
		status := e.Status
		if status >= 500 || status < 400 {
			status = http.StatusServiceUnavailable
		}
		reply(w, status, map[string]string{"error": "cannot send a code now", "reason": e.Code})
	}
}

// clientIP is the user's address for otpguard's per-IP limit: the peer,
// since the app is reached directly. Behind a proxy, take it from the
// proxy's header, believed only from the proxy's own address.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return host
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	d := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	d.DisallowUnknownFields()
	return d.Decode(v) == nil
}

func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// standInSiteverify: POST /standin/siteverify, the stand-in CAPTCHA's
// provider side, in siteverify's shape (form secret and response -> JSON
// success and hostname): it passes every token the stand-in widget makes,
// naming as the token's site the host it is served on, the app's, where
// its page runs the widget (otpguard holds it to
// OTPGUARD_CAPTCHA_HOSTNAMES). It proves nothing about the user; it lets
// the captcha flow run where no provider can be reached. Point
// OTPGUARD_CAPTCHA_VERIFY_URL at it only there.
func standInSiteverify(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		reply(w, http.StatusBadRequest, map[string]any{"success": false})
		return
	}
	ok := strings.HasPrefix(r.PostForm.Get("response"), "standin-pass-")
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	reply(w, http.StatusOK, map[string]any{"success": ok, "hostname": host})
}
