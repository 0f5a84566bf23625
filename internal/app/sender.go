package app

import (
	"context"
	"io"
	"net/http"
	"slices"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/sms"
)

// buildSender is how codes leave: the caller's sender (WithSender) for
// every channel the settings turn on, or the configured ones, each timed per provider and
// channel.
func (w *wiring) buildSender(_ context.Context) error {
	a := w.a
	senders, provider := sms.Channels{}, "custom"
	if w.o.sender != nil { // the channels the settings turn on, all by the caller's sender
		for _, ch := range a.cfg.Channels() {
			senders[ch] = w.o.sender
		}
	} else {
		var err error
		if senders, err = newSenders(a.cfg, w.o.output, w.tr.smsTransport()); err != nil {
			return err
		}
		provider = a.cfg.SMS
	}
	for ch, s := range senders {
		senders[ch] = sms.Timed(s, w.metrics.ProviderCalls(provider, ch, sms.Outcomes()))
	}
	w.sender, w.channels = senders, senders.Offers()
	return nil
}

// newSenders are the senders of the channels cfg turns on: the console
// prints every one of them, Twilio sends each by its API.
func newSenders(cfg *config.Config, stdout io.Writer, transport http.RoundTripper) (sms.Channels, error) {
	on := cfg.Channels()
	if cfg.SMS != "twilio" { // console, or unset in embedded mode
		console, out := sms.NewConsole(stdout), sms.Channels{}
		for _, ch := range on {
			out[ch] = console
		}
		return out, nil
	}
	out := sms.Channels{}
	var err error
	if out[guard.ChannelSMS], err = sms.NewTwilio(cfg.Twilio.Options(transport)); err != nil {
		return nil, err
	}
	if slices.Contains(on, guard.ChannelWhatsApp) {
		if out[guard.ChannelWhatsApp], err = sms.NewWhatsApp(cfg.Twilio.WhatsAppOptions(transport)); err != nil {
			return nil, err
		}
	}
	if slices.Contains(on, guard.ChannelCall) {
		if out[guard.ChannelCall], err = sms.NewVoice(cfg.Twilio.VoiceOptions(transport)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// statusCallback is what POST /sms/status checks Twilio's signature with;
// nil (the route answers 404) unless Twilio sends with a status callback.
func statusCallback(cfg *config.Config) httpapi.StatusCallback {
	if cfg.SMS != "twilio" || cfg.Twilio.StatusCallback == "" || cfg.Twilio.AuthToken == "" {
		return nil
	}
	return sms.TwilioCallback{URL: cfg.Twilio.StatusCallback, AuthToken: cfg.Twilio.AuthToken}
}
