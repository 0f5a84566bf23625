package guard

import "context"

// Message is one SMS to send. Body contains the code: never log it.
type Message struct {
	To   string // E.164
	Body string
}

// Sender delivers SMS. Implementations return an *Error with
// CodeInvalidDestination when the provider refuses the number, and
// CodeProviderUnavailable when the provider cannot be reached or fails.
type Sender interface {
	Send(ctx context.Context, m Message) error
}
