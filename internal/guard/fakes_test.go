package guard_test

// What the tests share beside guardtest's fakes: the HMAC key, a check of
// an error's code and a clock.

import (
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
)

var errRedisDown = guardtest.ErrRedisDown

var outageHMACKey = []byte("0123456789abcdef0123456789abcdef")

func wantCode(t *testing.T, err error, want guard.Code) {
	t.Helper()
	if got := guard.ErrorCode(err); got != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
}

// clock is an injected clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }
