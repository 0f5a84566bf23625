// Command signin is a sign-in page served by a small Go app that calls
// otpguard through the Go client, and passes otpguard's challenges to the
// user's browser: on a 428 the app hands the challenge to its page, the
// page solves it (ALTCHA's widget for proof of work, the CAPTCHA
// provider's widget for captcha) and posts the solution back, and the app
// sends again with it. The app never solves a challenge itself: a server
// that does the work for the bot proves nothing.
//
//	OTPGUARD_URL=http://127.0.0.1:8080 OTPGUARD_API_KEY=ogk_... go run ./examples/signin
//
// Environment: SIGNIN_ADDR (default 127.0.0.1:8091), OTPGUARD_URL
// (default http://127.0.0.1:8080), OTPGUARD_API_KEY (required),
// SIGNIN_CAPTCHA (the widget of a captcha challenge: turnstile, the
// default, or standin, an offline stand-in for tests and demos).
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
		fmt.Fprintln(os.Stderr, "signin:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, out io.Writer) error {
	cfg, err := configFrom(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(out, nil))
	h, err := newApp(cfg, log)
	if err != nil {
		return err
	}
	addr := getenv("SIGNIN_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8091"
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", "url", "http://"+addr+"/", "otpguard", cfg.OTPGuardURL, "captcha_widget", cfg.Captcha)
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
