// Command echoapp is a small echo v4 app that calls otpguard through the
// Go client and its middleware: a search route limited per client
// address, and a sign-in by one-time code.
//
//	OTPGUARD_URL=http://127.0.0.1:8080 OTPGUARD_API_KEY=ogk_... go run ./examples/echoapp
//
// Its otpguard needs a limit policy named "search" (any algorithm); the
// built-in "default" policy is used when ECHOAPP_POLICY=default.
//
// Environment: ECHOAPP_ADDR (default 127.0.0.1:8090), OTPGUARD_URL
// (default http://127.0.0.1:8080), OTPGUARD_API_KEY (required),
// ECHOAPP_POLICY (default search), ECHOAPP_ON_UNAVAILABLE (open or
// closed, default open), ECHOAPP_CHECK_TIMEOUT (default 100ms).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "echoapp:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, out io.Writer) error {
	cfg, err := configFrom(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(out, nil))
	e, err := newApp(cfg, log)
	if err != nil {
		return err
	}
	addr := getenv("ECHOAPP_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8090"
	}
	srv := &http.Server{Addr: addr, Handler: e, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", "addr", addr, "otpguard", cfg.OTPGuardURL, "on_unavailable", cfg.OnUnavailable.String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
