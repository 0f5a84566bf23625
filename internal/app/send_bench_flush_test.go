package app_test

import (
	"context"
	"testing"

	"github.com/otpguard/otpguard/internal/app"
)

// flushWatch waits for the conversion watch's queue (it runs after the
// answer), so that its round trips are counted.
func flushWatch(b *testing.B, a *app.App) {
	if err := a.FlushWatch(context.Background()); err != nil {
		b.Fatal(err)
	}
}
