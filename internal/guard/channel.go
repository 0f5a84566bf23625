package guard

import (
	"maps"
	"slices"
	"strings"

	"github.com/otpguard/otpguard/internal/problem"
)

// A send names its channel (SendRequest.Channel): SMS unless it says
// otherwise. A channel is offered when the deployment has its sender
// (OTPOptions.Channels); naming another is refused before any limit is
// spent, so a deployment without a voice number never counts a call.

// The channels a code can go by.
const (
	ChannelSMS      = "sms"
	ChannelWhatsApp = "whatsapp"
	ChannelCall     = "call"
)

// Channels lists every channel, SMS first.
func Channels() []string { return []string{ChannelSMS, ChannelWhatsApp, ChannelCall} }

// channels are the channels a deployment offers.
type channels []string

// newChannels is SMS and the channels offered beside it.
func newChannels(offered []string) channels {
	out := channels{ChannelSMS}
	for _, ch := range Channels()[1:] {
		if slices.Contains(offered, ch) {
			out = append(out, ch)
		}
	}
	return out
}

// check returns the channel a send named ("" is SMS), or why it is refused:
// a name that is no channel, or a channel not offered here.
func (c channels) check(name string) (string, error) {
	if name == "" {
		return ChannelSMS, nil
	}
	if !slices.Contains(Channels(), name) {
		if len(name) > 16 {
			name = name[:16]
		}
		return "", problem.Errorf(problem.CodeInvalidRequest, "channel %q is not a channel: use one of %s, or leave it out (sms)",
			name, strings.Join(Channels(), ", "))
	}
	if !slices.Contains(c, name) {
		return "", ChannelOff(name)
	}
	return name, nil
}

// checkChannel returns the channel a send under p named ("" is SMS), or
// why it is refused: as channels.check, and a channel the deployment
// offers but p's service does not (servicepolicy.go) is refused as one
// the deployment does not offer is.
func (p *servicePolicy) checkChannel(name string) (string, error) {
	ch, err := p.deployment.check(name)
	if err != nil {
		return "", err
	}
	if !slices.Contains(p.offered, ch) {
		return "", problem.Errorf(problem.CodeInvalidRequest, "the %s channel is off for this service: use %s",
			ch, strings.Join(p.offered, ", "))
	}
	return ch, nil
}

// ChannelOff is the refusal of a channel this deployment does not offer:
// its sender's settings are not set (docs/verify.md, "Channels").
func ChannelOff(name string) *problem.Error {
	return problem.Errorf(problem.CodeInvalidRequest, "the %s channel is off on this deployment (its sender is not configured)", name)
}

// Offers reports whether this deployment sends codes by channel (a
// service may offer fewer: servicepolicy.go).
func (s *OTP) Offers(channel string) bool { return slices.Contains(s.policies.base.offered, channel) }

// maxChannelPrice bounds a channel's price: a send worth more than a
// thousand SMS is a typo.
const maxChannelPrice = 1000

// validateChannels checks otp.channels: known channels, a price of 1 to
// maxChannelPrice, a window with each limit; SMS's window is per_phone.
func validateChannels(cs map[string]ChannelPolicy, bad func(field, format string, args ...any)) {
	for _, name := range slices.Sorted(maps.Keys(cs)) {
		c, field := cs[name], "otp.channels."+name
		switch {
		case !slices.Contains(Channels(), name):
			bad(field, "not a channel: use %s", strings.Join(Channels(), ", "))
		case c.Price < 1 || c.Price > maxChannelPrice:
			bad(field+".price", "must be 1..%d (the budget counts an SMS as 1), got %d", maxChannelPrice, c.Price)
		case name == ChannelSMS && c.PerPhone.Limit != 0:
			bad(field+".per_phone", "SMS's window is otp.per_phone")
		case c.PerPhone.Limit < 0 || c.PerPhone.Limit > 0 && c.PerPhone.Window <= 0:
			bad(field+".per_phone", "limit must be 0 (off) or more, with a window above 0")
		}
	}
}
