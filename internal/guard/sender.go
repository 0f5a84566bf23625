package guard

import (
	"context"
	"errors"
	"time"
)

// ErrNotSent is wrapped by a Sender's error when the provider certainly did
// not take the message: it answered with a refusal before accepting it (an
// error status of its own: bad credentials, its rate limit, its own server
// error), or the connection failed before the request reached it or before
// any answer came back. A timeout after the request was written, or an
// answer that cannot be read, is not that: the message may have left.
//
// A message certainly not sent is not counted against the number: its
// cooldown, its per-number count, its place in the SMS budget and its
// count in the country's hour are given back, so the user's next try is
// not refused for a code that never came (courier.deliver). The per-address
// and the automatic abuse limits stay spent.
var ErrNotSent = errors.New("the provider did not take the message")

// ProviderWait is implemented by a Sender's error that wraps ErrNotSent
// when the provider said how long to wait before the next try (its
// Retry-After): the refusal's answer passes it on, within bounds.
type ProviderWait interface {
	// ProviderWait is the wait the provider asked for; zero if none.
	ProviderWait() time.Duration
}

// Message is one code to send. Body and Code contain the code: never log
// them.
type Message struct {
	To   string // E.164
	Body string // the text: the policy's message with the code
	// Channel is how it goes: ChannelSMS (also ""), ChannelWhatsApp or
	// ChannelCall. A sender of one channel ignores it.
	Channel string
	// Code is the code alone: a WhatsApp template's variable, a call's
	// digits.
	Code string
	// Locale is the send's locale (canonical, "" none): a call's voice.
	Locale string
}

// Sender delivers SMS. Implementations return an *Error with
// CodeInvalidDestination when the provider refuses the number, and
// CodeProviderUnavailable when the provider cannot be reached or fails,
// wrapping ErrNotSent when it certainly did not take the message.
type Sender interface {
	Send(ctx context.Context, m Message) error
}
