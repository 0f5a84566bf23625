package guard_test

// What the tests share beside guardtest's fakes: the HMAC key and a check
// of an error's code.

import (
	"testing"

	"github.com/otpguard/otpguard/internal/problem"
)

var outageHMACKey = []byte("0123456789abcdef0123456789abcdef")

func wantCode(t *testing.T, err error, want problem.Code) {
	t.Helper()
	if got := problem.CodeOf(err); got != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
}
