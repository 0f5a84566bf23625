package app

import (
	"context"
	"io"
	"net/http"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/sms"
)

// buildSender is how codes leave: the caller's sender (WithSender) or the
// configured one, timed per provider.
func (w *wiring) buildSender(_ context.Context) error {
	a := w.a
	sender, provider := w.o.sender, "custom"
	if sender == nil {
		var err error
		if sender, err = newSender(a.cfg, w.o.output, w.tr.smsTransport()); err != nil {
			return err
		}
		provider = a.cfg.SMS
	}
	w.sender = sms.Timed(sender, w.metrics.ProviderCalls(provider, sms.Outcomes()))
	return nil
}

func newSender(cfg *config.Config, stdout io.Writer, transport http.RoundTripper) (guard.Sender, error) {
	if cfg.SMS != "twilio" { // console, or unset in embedded mode
		return sms.NewConsole(stdout), nil
	}
	return sms.NewTwilio(cfg.Twilio.Options(transport))
}

// statusCallback is what POST /sms/status checks Twilio's signature with;
// nil (the route answers 404) unless Twilio sends with a status callback.
func statusCallback(cfg *config.Config) httpapi.StatusCallback {
	if cfg.SMS != "twilio" || cfg.Twilio.StatusCallback == "" || cfg.Twilio.AuthToken == "" {
		return nil
	}
	return sms.TwilioCallback{URL: cfg.Twilio.StatusCallback, AuthToken: cfg.Twilio.AuthToken}
}
