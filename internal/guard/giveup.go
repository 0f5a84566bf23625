package guard

import "context"

// GiveUpKey is the context key under which a waiter hands a call its
// give-up channel (GiveUp).
type GiveUpKey struct{}

// GiveUp is the channel on which whoever waits for ctx's call says that it
// gives up on it before ctx itself ends: nil when there is none. A call
// that can be abandoned (resilience.Abandoner) returns as soon as ctx ends
// or this channel is closed, whichever is first.
//
// It exists so that resilience's inline wait need not derive a cancellable
// context per call: context.WithCancelCause registers with the caller's
// context and removes itself again, a visible share of otpguard's CPU
// on the gRPC path (docs/benchmarks.md).
func GiveUp(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(GiveUpKey{}).(<-chan struct{})
	return ch
}
