package sms

import (
	"context"
	"fmt"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// Channels sends each message by the sender of its channel (its
// Message.Channel; "" is SMS). A channel it has no sender for is refused
// without a call: the routes refuse it first (guard.OTPOptions.Channels),
// so this is the last word, not the usual one.
type Channels map[string]guard.Sender

// Send implements guard.Sender.
func (c Channels) Send(ctx context.Context, m guard.Message) error {
	ch := m.Channel
	if ch == "" {
		ch = guard.ChannelSMS
	}
	s, ok := c[ch]
	if !ok {
		return &problem.Error{Code: problem.CodeInvalidRequest,
			Message: fmt.Sprintf("the %s channel is not configured", ch),
			Err:     &NotSent{Err: fmt.Errorf("sms: no sender for channel %q", ch)}}
	}
	return s.Send(ctx, m)
}

// Offers lists the channels c has a sender for, in guard.Channels' order.
func (c Channels) Offers() []string {
	var out []string
	for _, ch := range guard.Channels() {
		if _, ok := c[ch]; ok {
			out = append(out, ch)
		}
	}
	return out
}
