package guard

import (
	"context"
	"errors"
)

// ErrNotSent is wrapped by a Sender's error when the provider certainly did
// not take the message: it answered with a refusal (bad credentials, an
// unknown sender, its own rate limit), as opposed to a timeout or a 5xx,
// after which the message may have left. A message certainly not sent
// gives its place in the SMS budget back; the send limits stay spent.
var ErrNotSent = errors.New("the provider did not take the message")

// Message is one SMS to send. Body contains the code: never log it.
type Message struct {
	To   string // E.164
	Body string
}

// Sender delivers SMS. Implementations return an *Error with
// CodeInvalidDestination when the provider refuses the number, and
// CodeProviderUnavailable when the provider cannot be reached or fails,
// wrapping ErrNotSent when it certainly did not take the message.
type Sender interface {
	Send(ctx context.Context, m Message) error
}
