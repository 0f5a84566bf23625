package config

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sms"
)

// Channels are the channels this configuration offers, SMS first: SMS
// always; whatsapp with TWILIO_WHATSAPP_FROM and
// TWILIO_WHATSAPP_CONTENT_SID; call with TWILIO_VOICE_FROM. A send on
// another channel is refused at its route, not at start.
func (c *Config) Channels() []string {
	out := []string{guard.ChannelSMS}
	if c.Twilio.WhatsAppOn() {
		out = append(out, guard.ChannelWhatsApp)
	}
	if c.Twilio.VoiceOn() {
		out = append(out, guard.ChannelCall)
	}
	return out
}

// WhatsAppOn reports whether the WhatsApp channel's settings are set.
func (t TwilioConfig) WhatsAppOn() bool { return t.WhatsAppFrom != "" && t.WhatsAppContentSID != "" }

// VoiceOn reports whether the call channel's settings are set.
func (t TwilioConfig) VoiceOn() bool { return t.VoiceFrom != "" }

// WhatsAppOptions is the WhatsApp sender's options on this account.
func (t TwilioConfig) WhatsAppOptions(transport http.RoundTripper) sms.WhatsAppOptions {
	return sms.WhatsAppOptions{Account: t.Options(transport), From: t.WhatsAppFrom, ContentSID: t.WhatsAppContentSID}
}

// VoiceOptions is the voice sender's options on this account.
func (t TwilioConfig) VoiceOptions(transport http.RoundTripper) sms.VoiceOptions {
	return sms.VoiceOptions{Account: t.Options(transport), From: t.VoiceFrom}
}

// checkChannels: a WhatsApp sender has both its settings, and each
// channel's settings are ones Twilio takes (with OTPGUARD_SMS=twilio).
func (t TwilioConfig) checkChannels() []error {
	var errs []error
	if (t.WhatsAppFrom == "") != (t.WhatsAppContentSID == "") {
		errs = append(errs, errors.New("TWILIO_WHATSAPP_FROM and TWILIO_WHATSAPP_CONTENT_SID: set both to turn the whatsapp channel on, or neither"))
	}
	if t.AccountSID == "" || t.AuthToken == "" {
		return errs // said by checkTwilio
	}
	if t.WhatsAppOn() {
		if _, err := sms.NewWhatsApp(t.WhatsAppOptions(nil)); err != nil {
			errs = append(errs, err)
		}
	}
	if t.VoiceOn() {
		if _, err := sms.NewVoice(t.VoiceOptions(nil)); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkFallback: otp.fallback_channel names a channel these settings turn
// on; a fallback that cannot send would be offered to nobody.
func (c *Config) checkFallback() error {
	fb := c.Policies.OTP.FallbackChannel
	if fb == "" || slices.Contains(c.Channels(), fb) {
		return nil
	}
	return fmt.Errorf("policy file %s: otp.fallback_channel: the %s channel is off (set TWILIO_WHATSAPP_FROM and TWILIO_WHATSAPP_CONTENT_SID to turn it on)",
		or(c.ConfigFile, "(defaults)"), fb)
}
