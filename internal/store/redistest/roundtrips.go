package redistest

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts what a client sends to Redis:
// a command, or a whole pipeline or MULTI/EXEC, is one round trip.
// Connection set-up (HELLO, AUTH, CLIENT, SELECT) is not counted, nor is
// the heartbeat an instance sends on its own clock rather than for a
// request (its key ends in {instances}): on a busy machine a request can
// take long enough for a beat to land inside the count.
type RoundTrips struct{ n atomic.Int64 }

var _ redis.Hook = (*RoundTrips)(nil)

// N returns the round trips counted so far.
func (h *RoundTrips) N() int64 { return h.n.Load() }

// Reset starts the count again.
func (h *RoundTrips) Reset() { h.n.Store(0) }

// Report adds roundtrips/op to a benchmark and fails it when an operation
// took other than want round trips: that a decision costs one round trip
// is a promise of the design, not just a figure.
func (h *RoundTrips) Report(b *testing.B, want float64) {
	b.Helper()
	rt := float64(h.n.Load()) / float64(b.N)
	b.ReportMetric(rt, "roundtrips/op")
	if rt != want {
		b.Errorf("%.3f round trips per op, want %v", rt, want)
	}
}

// DialHook passes dials through.
func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook counts one command.
func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !uncounted(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one pipeline or transaction.
func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !uncounted(c) {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// uncounted reports whether c is set-up or background, not a round trip.
func uncounted(c redis.Cmder) bool {
	switch c.Name() {
	case "hello", "auth", "client", "select":
		return true
	}
	for _, a := range c.Args() {
		if s, ok := a.(string); ok && strings.HasSuffix(s, "{instances}") {
			return true
		}
	}
	return false
}
