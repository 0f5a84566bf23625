package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// Run serves the handler on cfg.Addr until ctx ends, then finishes the
// requests in flight (for at most drainTimeout), cuts what is left (see
// drainTimeout, httpserver.go) and returns. Call Close after it: the
// probe, the heartbeat and the writers (audit queue, attack view, hot keys) do not end with ctx
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
	srv := apiServer(a.handler, base, a.log)
	a.log.Info("listening", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String())
	if a.cfg.DebugAddr != "" {
		stopDebug, err := serveDebug(a.cfg.DebugAddr, a.log)
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
	if err := drain(srv, cut, a.log); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	a.log.Info("stopped")
	return nil
}
