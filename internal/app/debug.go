package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveDebug serves Go's runtime profiles on addr (OTPGUARD_DEBUG_ADDR),
// a listener of their own and never the API's: the API's routes, keys and
// limits stay what the OpenAPI spec says, and the profiles stay on
// loopback (checkDebugAddr). This is how docs/benchmarks.md's CPU profiles
// of a saturated server are taken:
//
//	go tool pprof 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10'
//
// It logs the address it listens on and returns a stop that closes it.
func (a *App) serveDebug(addr string) (func(), error) {
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
			a.log.Warn("debug listener stopped", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/debug/pprof/"
	a.log.Info("debug listener: Go runtime profiles (loopback only)", "addr", ln.Addr().String(), "url", url)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close() // a profile still being taken is cut
		}
	}, nil
}
