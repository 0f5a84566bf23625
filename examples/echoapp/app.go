package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/client/echolimit"
	"github.com/otpguard/otpguard/client/limitmw"
)

// config is what the app needs to reach otpguard.
type config struct {
	OTPGuardURL   string
	APIKey        string
	Policy        string          // the limit policy of GET /search
	OnUnavailable limitmw.Failure // when otpguard gives no decision
	CheckTimeout  time.Duration
}

func configFrom(getenv func(string) string) (config, error) {
	c := config{OTPGuardURL: getenv("OTPGUARD_URL"), APIKey: getenv("OTPGUARD_API_KEY"), Policy: getenv("ECHOAPP_POLICY"),
		OnUnavailable: limitmw.FailOpen, CheckTimeout: limitmw.DefaultTimeout}
	if c.OTPGuardURL == "" {
		c.OTPGuardURL = "http://127.0.0.1:8080"
	}
	if c.APIKey == "" {
		return c, errors.New("set OTPGUARD_API_KEY (otpguard prints one at start-up in embedded mode)")
	}
	if c.Policy == "" {
		c.Policy = "search"
	}
	switch v := getenv("ECHOAPP_ON_UNAVAILABLE"); v {
	case "", "open":
	case "closed":
		c.OnUnavailable = limitmw.FailClosed
	default:
		return c, fmt.Errorf("ECHOAPP_ON_UNAVAILABLE=%q: want open or closed", v)
	}
	if v := getenv("ECHOAPP_CHECK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("ECHOAPP_CHECK_TIMEOUT=%q: want a duration such as 100ms", v)
		}
		c.CheckTimeout = d
	}
	return c, nil
}

// newApp wires the routes: one client of otpguard (shared, so its
// connections and its denied-key memory are too) and one limiter.
func newApp(cfg config, log *slog.Logger) (*echo.Echo, error) {
	c, err := client.New(cfg.OTPGuardURL, client.WithAPIKey(cfg.APIKey), client.WithUserAgent("echoapp"))
	if err != nil {
		return nil, err
	}
	lim, err := limitmw.New(c, limitmw.Options{
		OnUnavailable: cfg.OnUnavailable, Timeout: cfg.CheckTimeout,
		OnError: func(r *http.Request, err error) {
			log.Warn("rate limiter gave no decision", "path", r.URL.Path, "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// The app is reached directly: believe no forwarding header. Behind a
	// proxy, use echo.ExtractIPFromXFFHeader with that proxy's range.
	e.IPExtractor = echo.ExtractIPDirect()

	a := &handlers{otp: c}
	e.GET("/search", a.search, echolimit.Middleware(lim, echolimit.Rule{Policy: cfg.Policy, Key: echolimit.RealIP}))
	e.POST("/login/code", a.sendCode)
	e.POST("/login/verify", a.verifyCode)
	return e, nil
}

type handlers struct{ otp *client.Client }

// search: GET /search, limited per client address by the middleware.
func (a *handlers) search(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"q": c.QueryParam("q"), "results": []string{}})
}

type codeRequest struct {
	Phone string `json:"phone"`
	Code  string `json:"code"`
}

// sendCode: POST /login/code. Sends a sign-in code through otpguard; a
// retry of the user's request (same Idempotency-Key) sends no second SMS.
func (a *handlers) sendCode(c echo.Context) error {
	var req codeRequest
	if err := c.Bind(&req); err != nil || req.Phone == "" {
		return c.JSON(http.StatusBadRequest, map[string]string{"error": "send {\"phone\": \"+...\"}"})
	}
	res, err := a.otp.Send(c.Request().Context(), client.SendRequest{
		Phone: req.Phone, ClientIP: c.RealIP(), IdempotencyKey: c.Request().Header.Get("Idempotency-Key"),
	})
	if err != nil {
		return otpError(c, err)
	}
	out := map[string]any{"sent_to": res.Phone, "expires_in": res.ExpiresIn}
	if res.VerificationID != "" { // otpguard from issue 15 on
		out["verification_id"] = res.VerificationID
	}
	return c.JSON(http.StatusOK, out)
}

// verifyCode: POST /login/verify.
func (a *handlers) verifyCode(c echo.Context) error {
	var req codeRequest
	if err := c.Bind(&req); err != nil || req.Phone == "" || req.Code == "" {
		return c.JSON(http.StatusBadRequest, map[string]string{"error": "send {\"phone\": \"+...\", \"code\": \"...\"}"})
	}
	if _, err := a.otp.Verify(c.Request().Context(), client.VerifyRequest{Phone: req.Phone, Code: req.Code}); err != nil {
		return otpError(c, err)
	}
	return c.JSON(http.StatusOK, map[string]any{"signed_in": true})
}

// otpError answers otpguard's refusal in the app's own words, passing on
// when to try again.
func otpError(c echo.Context, err error) error {
	var e *client.Error
	switch {
	case client.IsUnavailable(err):
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"error": "sign-in codes are unavailable; try again shortly"})
	case !errors.As(err, &e):
		return err
	}
	if e.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter/time.Second)))
	}
	switch e.Code {
	case client.CodeWrongCode, client.CodeNoActiveCode, client.CodeTooManyAttempts:
		return c.JSON(http.StatusUnauthorized, map[string]string{"error": "that code did not work", "reason": e.Code})
	case client.CodeInvalidPhone:
		return c.JSON(http.StatusUnprocessableEntity, map[string]string{"error": "that is not a phone number we can send to"})
	}
	status := e.Status
	if status >= 500 || status < 400 {
		status = http.StatusServiceUnavailable
	}
	return c.JSON(status, map[string]string{"error": "cannot send a code now", "reason": e.Code})
}
