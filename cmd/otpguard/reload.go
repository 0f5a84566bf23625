package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/otpguard/otpguard/internal/app"
)

// reloadOnSIGHUP reloads the policy file at every SIGHUP until ctx ends or
// stop is called (README.md, "Changing limits during an attack"). A bad
// file keeps the policy in force; Reload logs and counts it.
func reloadOnSIGHUP(ctx context.Context, a *app.App) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				a.Logger().Info("SIGHUP: reloading the policy file")
				_ = a.Reload(ctx) // logged, counted and shown in /ops/status inside
			}
		}
	}()
	return func() { signal.Stop(hup); cancel(); <-done }
}
