package app

import (
	"context"
	"errors"
	"testing"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// TestPromotedMasterBreakerDropped: a dead master's breaker is dropped at
// the end of the first probe round whose slot map no longer names it,
// even when a ping failed in that round (a node still catching up), and
// it is not reported afterwards.
func TestPromotedMasterBreakerDropped(t *testing.T) {
	fb := resilience.NewFallback(resilience.FallbackOptions{NodeOf: func(limit.Key) string { return "" },
		Breaker: resilience.BreakerOptions{Failures: 1}})
	o := &outage{fallback: fb}
	ctx := context.Background()
	dead := errors.New("dial tcp 10.0.0.3:6379: connect: connection refused")
	round := func(pings map[string]error) bool {
		var masters []string
		failed := false
		for m, err := range pings {
			fb.ObserveNodeProbe(ctx, m, err)
			masters, failed = append(masters, m), failed || err != nil
		}
		return o.endRound(masters, failed)
	}
	round(map[string]error{"10.0.0.1:6379": nil, "10.0.0.2:6379": nil, "10.0.0.3:6379": nil})
	round(map[string]error{"10.0.0.1:6379": nil, "10.0.0.2:6379": nil, "10.0.0.3:6379": dead})
	// The promotion: 10.0.0.4 holds the dead master's slots; a ping fails
	// in this round too (the new master not answering yet).
	if !round(map[string]error{"10.0.0.1:6379": nil, "10.0.0.2:6379": nil, "10.0.0.4:6379": dead}) {
		t.Error("a round whose masters changed did not ask for the slot map's reload")
	}
	round(map[string]error{"10.0.0.1:6379": nil, "10.0.0.2:6379": nil, "10.0.0.4:6379": nil})
	for _, n := range fb.Status().Nodes {
		if n.Node == "10.0.0.3:6379" {
			t.Errorf("the dead master's breaker (%s) is still reported after its replica's promotion: %+v", n.Breaker, fb.Status().Nodes)
		}
	}
}
