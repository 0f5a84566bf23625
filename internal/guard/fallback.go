package guard

import (
	"errors"
	"slices"

	"github.com/otpguard/otpguard/internal/problem"
)

// A fallback channel (docs/otp.md, "A fallback channel"). Where an SMS
// send would be challenged (428) or refused by an automatic rule, the
// answer names the policy's fallback channel (otp.fallback_channel), and
// the caller may send again by it. WhatsApp is the one channel that may
// be it: an authentication message pays no termination to the number's
// carrier, so a pumping ring earns nothing by it, and the automatic rules
// (the file's prefix and country limits, the country velocity rule with
// its unverified budget, cold room and solved and trusted caps, the
// conversion watch's automatic blocks, the risk score's step) do not hold
// its sends. Every other rule does: the cooldown, per_phone and the
// channel's own window, per address, the deny-list's operator entries,
// the ops desk's overrides and the spend budget at the channel's price.
// A call stays under the automatic rules (toll fraud pumps calls), and
// SMS is what falls back.
//
// A fallback send counts in none of the automatic rules' tallies, and its
// verification carries a mark (tiermark.go) so that its verify credits
// none of them either: the baselines learn from SMS users only, so real
// users' WhatsApp codes cannot vouch for a ring's unverified SMS. Its
// verify still remembers the number as verified (trust.go).

// validateFallback checks otp.fallback_channel.
func validateFallback(ch string, bad func(field, format string, args ...any)) {
	const field = "otp.fallback_channel"
	switch ch {
	case "", ChannelWhatsApp:
	case ChannelSMS:
		bad(field, "SMS is the channel a send falls back from: name whatsapp, or leave it empty")
	case ChannelCall:
		bad(field, "calls are held by the automatic rules (toll fraud pumps calls as it pumps SMS): only whatsapp may be the fallback")
	default:
		bad(field, "not a channel the automatic rules spare: use whatsapp, or leave it empty")
	}
}

// fallbackOf is the channel a challenged or automatically refused SMS
// send is offered: the policy's fallback when the deployment offers it,
// else "".
func fallbackOf(p OTPPolicy, offered channels) string {
	if fb := p.FallbackChannel; fb != "" && slices.Contains(offered, fb) {
		return fb
	}
	return ""
}

// FallbackChannel is the channel a challenged or automatically refused
// SMS send is offered (otp.fallback_channel, when this deployment offers
// it); "" none.
func (s *OTP) FallbackChannel() string { return s.policies.base.fallback }

// offerFallback names the fallback channel fb (the send's service's: a
// service that does not offer it has none) in the refusal (err) of a
// send by channel when it is SMS and a challenge or an automatic rule
// held it; any other refusal stays as it is.
func offerFallback(fb, channel string, err error) error {
	var e *problem.Error
	if fb == "" || channel != ChannelSMS || !errors.As(err, &e) {
		return err
	}
	if e.Code != problem.CodeChallengeRequired && !automaticRefusal(err) {
		return err
	}
	offered := *e
	offered.Fallback = fb
	return &offered
}
