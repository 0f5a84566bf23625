package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The HTTP servers Run starts: the API listener's (Go's net/http serving
// the echo handler for every route), how it drains at shutdown, and the
// debug listener of Go's runtime profiles.

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

// drain waits drainTimeout for the requests in flight, then cuts them and
// waits cutGrace more for them to record their outcome and answer.
func drain(srv *http.Server, cut context.CancelFunc, log *slog.Logger) error {
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	err := srv.Shutdown(dctx)
	cancel()
	if err == nil {
		return nil
	}
	log.Warn("shutdown: requests still running after the drain; cutting them", "drain", drainTimeout.String())
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
// handler h for every route; its requests run on base.
func apiServer(h http.Handler, base context.Context, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		// net/http's own complaints (a handler's panic, an accept error)
		// as structured lines of the one log, not bare lines on stderr.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serveDebug serves Go's runtime profiles on addr (OTPGUARD_DEBUG_ADDR),
// a listener of their own and never the API's: the API's routes, keys and
// limits stay what the OpenAPI spec says, and the profiles stay on
// loopback (internal/config refuses any other address). A CPU profile is
// taken so:
//
//	go tool pprof 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10'
//
// It logs the address it listens on and returns a stop that closes it.
func serveDebug(addr string, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, block, mutex, allocs ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No WriteTimeout: a CPU profile or a trace answers after the seconds
	// asked for.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug listener stopped", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/debug/pprof/"
	log.Info("debug listener: Go runtime profiles (loopback only)", "addr", ln.Addr().String(), "url", url)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close() // a profile still being taken is cut
		}
	}, nil
}
