package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Shutdown timing. drainTimeout is how long Run waits for requests in
// flight: longer than the SMS provider's own timeout (10 s, sms.Twilio),
// so that a send waiting on a hung provider ends by that timeout, with its
// outcome (provider_unavailable) recorded, before the drain gives up. What
// is still running after the drain is cut: its context is cancelled, and
// it gets cutGrace to record its outcome and answer.
const (
	drainTimeout = 15 * time.Second
	cutGrace     = 2 * time.Second
)

// Run serves the handler on cfg.Addr until ctx ends, then finishes the
// requests in flight (for at most drainTimeout), cuts what is left (see
// drainTimeout) and returns. Call Close after it: the probe, the heartbeat
// and the writers (audit queue, attack view, hot keys) do not end with ctx
// but at Close, so the requests draining and what they leave to store are
// decided as before the signal. It returns an error only when serving
// failed or a request would not stop even when cut.
func (a *App) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.Addr, err)
	}
	// Requests run on base, not on ctx: cancelling ctx starts the drain,
	// cancelling base cuts what the drain did not finish.
	base, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	srv := a.apiServer(base)
	a.log.Info("listening", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String())
	if a.cfg.DebugAddr != "" {
		stopDebug, err := a.serveDebug(a.cfg.DebugAddr)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopDebug()
	}
	stopGRPC := func(context.Context) {}
	if a.envoy != nil {
		if stopGRPC, err = a.envoy.serve(); err != nil {
			ln.Close()
			return err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		stopGRPC(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down: finishing requests in flight", "at_most", drainTimeout.String())
	gctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	stopGRPC(gctx) // the gateways' calls under way, then the HTTP ones
	cancel()
	if err := a.drain(srv, cut); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	a.log.Info("stopped")
	return nil
}

// drain waits drainTimeout for the requests in flight, then cuts them and
// waits cutGrace more for them to record their outcome and answer.
func (a *App) drain(srv *http.Server, cut context.CancelFunc) error {
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	err := srv.Shutdown(dctx)
	cancel()
	if err == nil {
		return nil
	}
	a.log.Warn("shutdown: requests still running after the drain; cutting them", "drain", drainTimeout.String())
	cut()
	gctx, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	// A second Shutdown may also report the listener closed by the first:
	// only a request still running is a failure.
	if err := srv.Shutdown(gctx); errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
		return fmt.Errorf("shutdown: requests did not stop even when cut: %w", err)
	}
	return nil
}

// maxHeaderBytes bounds a request's header: net/http allows 4 KiB more
// than it (its bufio slack), so a header of up to 20 KiB is read and 431
// answers one past that.
const maxHeaderBytes = 16 << 10

// apiServer is the API listener's server, Go's net/http serving the echo
// handler for every route; its requests run on base.
func (a *App) apiServer(base context.Context) *http.Server {
	return &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		// net/http's own complaints (a handler's panic, an accept error)
		// as structured lines of the one log, not bare lines on stderr.
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
}
