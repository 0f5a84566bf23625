package limit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"

	"github.com/otpguard/otpguard/internal/limit"
)

// TestStoreFailureLevel: what an outage does to every request (the open
// breaker's refusal, a timeout, a lost connection) logs at debug, since
// the breaker tells the outage once; an error reply or an unreadable one
// is an error.
func TestStoreFailureLevel(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want slog.Level
	}{
		{fmt.Errorf("guard: redis breaker open: %w", limit.ErrStoreUnavailable), slog.LevelDebug},
		{fmt.Errorf("store: take: %w", context.DeadlineExceeded), slog.LevelDebug},
		{fmt.Errorf("store: take: %w", opErr), slog.LevelDebug},
		{fmt.Errorf("store: take: %w", io.EOF), slog.LevelDebug},
		{fmt.Errorf("store: take: %w", syscall.ECONNRESET), slog.LevelDebug},
		{errors.New("store: take: WRONGTYPE Operation against a key holding the wrong kind of value"), slog.LevelError},
		{errors.New("store: take: token bucket script returned 3 values, want 4"), slog.LevelError},
	} {
		if got := limit.StoreFailureLevel(tc.err); got != tc.want {
			t.Errorf("StoreFailureLevel(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
