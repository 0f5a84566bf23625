package limit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// StoreRetryAfter is the Retry-After of a 503 when the limit store is
// unavailable and the policy fails closed (or an ops unblock failed): long
// enough not to hammer a recovering Redis.
const StoreRetryAfter = 60 * time.Second

// ErrStoreUnavailable is the cause of a store call the fallback did not make: the
// breaker is open, or the store already failed within the same decision.
var ErrStoreUnavailable = errors.New("the shared store is unavailable")

// StoreError is what a failed store call answers: 503 overloaded when
// otpguard gave up on a healthy Redis, 503 store_unavailable otherwise.
func StoreError(err error) *problem.Error {
	if !errors.Is(err, problem.ErrOverloaded) {
		return StoreUnavailable(err, StoreRetryAfter)
	}
	return problem.Overloaded(err)
}

// StoreUnavailable wraps a failure of the limit store: the caller sees 503
// and a retry hint, the log sees the cause. The ops desk answers a failed
// unblock or block listing with it too.
func StoreUnavailable(err error, retryAfter time.Duration) *problem.Error {
	return &problem.Error{
		Code:       problem.CodeStoreUnavailable,
		Message:    "the limit store is unavailable; try again shortly",
		RetryAfter: retryAfter,
		Err:        err,
	}
}

// StoreFailureLevel is how loudly to log a decision the store failed. An
// outage is told once, by the breaker opening (one WARN line, Fallback),
// not by every request it meets: a refusal by the open breaker
// (ErrStoreUnavailable), and a call that timed out or lost its connection,
// log at debug. Anything else (an error reply, a reply otpguard cannot
// read) says something is wrong with the store's contents or with
// otpguard, and is an error worth its line.
func StoreFailureLevel(err error) slog.Level {
	if errors.Is(err, ErrStoreUnavailable) || errors.Is(err, problem.ErrOverloaded) || errors.Is(err, context.Canceled) || isTransportFailure(err) {
		return slog.LevelDebug
	}
	return slog.LevelError
}

// isTransportFailure reports whether err is a store call that did not get
// an answer: its deadline passed, or the connection failed (a net.Error,
// EOF), whatever client made it.
func isTransportFailure(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &netErr)
}
