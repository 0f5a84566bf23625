package sms

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// The outcomes of one call to the SMS provider, as Timed reports them
// (the outcome label of otpguard_sms_provider_duration_seconds).
const (
	OutcomeSent     = "sent"                // the provider took the message
	OutcomeRefused  = "invalid_destination" // it refused the number
	OutcomeRejected = "not_sent"            // it refused the message, or was not reached: surely not sent (guard.ErrNotSent)
	OutcomeTimeout  = "timeout"             // no answer in time: the message may have left
	OutcomeError    = "error"               // it failed otherwise (a gateway's 5xx, a lost answer): may have left
)

// Outcomes lists every outcome Timed reports, so that their series can
// be created at zero.
func Outcomes() []string {
	return []string{OutcomeSent, OutcomeRefused, OutcomeRejected, OutcomeTimeout, OutcomeError}
}

// Timed returns next reporting how each call ended, and how long it took,
// to observe (metrics.Set.ProviderCalls).
func Timed(next guard.Sender, observe func(outcome string, d time.Duration)) guard.Sender {
	return &timed{next: next, observe: observe}
}

type timed struct {
	next    guard.Sender
	observe func(outcome string, d time.Duration)
}

// Send implements guard.Sender.
func (t *timed) Send(ctx context.Context, msg guard.Message) error {
	start := time.Now()
	err := t.next.Send(ctx, msg)
	t.observe(outcome(err), time.Since(start))
	return err
}

// outcome tells apart each way a provider call ends, as the alert on
// failing sends needs (timeout and error may have left; the others surely
// did not).
func outcome(err error) string {
	var timeout net.Error
	switch {
	case err == nil:
		return OutcomeSent
	case problem.CodeOf(err) == problem.CodeInvalidDestination:
		return OutcomeRefused
	case errors.Is(err, guard.ErrNotSent):
		return OutcomeRejected
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout():
		return OutcomeTimeout
	}
	return OutcomeError
}
