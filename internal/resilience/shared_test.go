package resilience_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// sendStore is nodeStore as a SendCounter and Trusts: a send's volume and
// a trust mark live on the node of their key's ID (the country), and the
// store answers a volume with the hour's limit volLimit.
type sendStore struct {
	*nodeStore
	volLimit int64
	// carrierRefuses (nil: never): the volume is refused by the send's
	// carrier's share, whose limit is 2.
	carrierRefuses *atomic.Bool
}

func (s sendStore) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	res, err := s.Take(ctx, takes)
	if err != nil || vol == nil {
		return res, nil, err
	}
	if err := s.enter([]limit.Take{{Key: vol.Key}}); err != nil {
		return nil, nil, err
	}
	if s.carrierRefuses != nil && s.carrierRefuses.Load() {
		return res, &guard.VolumeResult{Count: 2, Limit: 2, Carrier: true}, nil
	}
	return res, &guard.VolumeResult{Allowed: true, Count: 1, Limit: s.volLimit}, nil
}

func (s sendStore) Trusted(_ context.Context, mark limit.Key) (bool, error) {
	return false, s.enter([]limit.Take{{Key: mark}})
}

func (s sendStore) MarkTrusted(context.Context, []guard.TrustMark, time.Duration) (int, error) {
	return 0, nil
}

// volumeTake is the velocity rule's count of a send to GB, whose keys are
// on node c.
func volumeTake(newOff bool) *guard.VolumeTake {
	return &guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "GB", Name: "h"}, Now: time.Unix(3600*500000, 0),
		Floor: 50, Mark: limit.Key{Space: "otp:tr", ID: "GB", Name: "mark"}, NewOff: newOff}
}

// A send whose number's keys answer is never refused because its
// country's node is dead: the volume is decided from memory by the split
// limit of the last limit the store gave, the rule is logged at WARN once
// for the outage, and every such decision is counted.
func TestDeadCountryNodeDecidesVolumeFromMemory(t *testing.T) {
	s := sendStore{nodeStore: newNodeStore(map[string]string{"+447911000001": "a", "198.51.100.7": "b", "GB": "c"}), volLimit: 8}
	var logs bytes.Buffer
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: s, NodeOf: s.nodeOf, Instances: func() int { return 2 },
		Breaker: resilience.BreakerOptions{Failures: 3, OpenFor: time.Hour}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	takes := sendTakes()[:2] // the number's and its address's limits, both closed
	if _, vr, err := f.TakeSend(ctx, takes, volumeTake(false)); err != nil || vr == nil || vr.Fallback {
		t.Fatalf("with every node up: %+v, %v; want the store's answer", vr, err)
	}
	s.mu.Lock()
	s.down["c"] = true
	s.mu.Unlock()
	allowed := 0
	for i := range 8 { // the number's own limit, 10, allows them all
		res, vr, err := f.TakeSend(ctx, takes, volumeTake(false))
		if err != nil {
			t.Fatalf("send %d with the country's node dead: %v, want it decided", i, err)
		}
		if vr == nil || !vr.Fallback || vr.Limit != 4 {
			t.Fatalf("send %d: volume %+v, want decided from memory with the split limit 8/2 = 4", i, vr)
		}
		if res[0].Fallback || res[1].Fallback {
			t.Errorf("send %d: the live nodes' limits were decided from memory: %+v", i, res)
		}
		if vr.Allowed {
			allowed++
		}
	}
	if allowed != 4 {
		t.Errorf("%d sends allowed by the volume from memory, want 4 (8 / 2 instances)", allowed)
	}
	if got := f.SharedFallbacks()["otp:vel:h"]; got != 8 {
		t.Errorf("otp:vel:h decided from memory %d times, want 8 (%v)", got, f.SharedFallbacks())
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"shared limit decided from this instance's memory"); n != 2 {
		t.Errorf("%d WARN lines, want 2 (the trust mark's rule and the volume's, once each):\n%s", n, logs.String())
	}
}

// A carrier's refusal answers the carrier's limit: the split limit of a
// dead country node stays the country's.
func TestCarrierRefusalKeepsTheCountrysSplitLimit(t *testing.T) {
	refuses := &atomic.Bool{}
	s := sendStore{nodeStore: newNodeStore(map[string]string{"+447911000001": "a", "198.51.100.7": "b", "GB": "c"}),
		volLimit: 8, carrierRefuses: refuses}
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: s, NodeOf: s.nodeOf, Instances: func() int { return 2 },
		Breaker: resilience.BreakerOptions{Failures: 3, OpenFor: time.Hour}, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	takes := sendTakes()[:2]
	if _, vr, err := f.TakeSend(ctx, takes, volumeTake(false)); err != nil || vr == nil || !vr.Allowed {
		t.Fatalf("the country's answer: %+v, %v", vr, err)
	}
	refuses.Store(true)
	if _, vr, err := f.TakeSend(ctx, takes, volumeTake(false)); err != nil || vr == nil || !vr.Carrier {
		t.Fatalf("the carrier's refusal: %+v, %v", vr, err)
	}
	s.mu.Lock()
	s.down["c"] = true
	s.mu.Unlock()
	if _, vr, err := f.TakeSend(ctx, takes, volumeTake(false)); err != nil || vr == nil || !vr.Fallback || vr.Limit != 4 {
		t.Fatalf("the country's node dead: %+v, %v; want the split of the country's 8, 4", vr, err)
	}
}

// With the velocity rule off, an untrusted send counts nothing in its
// country: once its mark is read, its volume key is not touched.
func TestVelocityOffTouchesNoVolumeKey(t *testing.T) {
	s := sendStore{nodeStore: newNodeStore(map[string]string{"+447911000001": "a", "198.51.100.7": "b", "GB": "c"}), volLimit: 8}
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: s, NodeOf: s.nodeOf})
	_, vr, err := f.TakeSend(context.Background(), sendTakes()[:2], volumeTake(true))
	if err != nil || vr == nil || !vr.Allowed {
		t.Fatalf("send: %+v, %v; want allowed", vr, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := 0
	for _, call := range s.calls {
		if slices.Contains(call, "c") {
			c++
		}
	}
	if c != 1 {
		t.Errorf("%d calls to the country's node, want 1 (the trust mark's read; no volume): %v", c, s.calls)
	}
}

// A solved send whose country's node is dead is not decided from memory:
// the solution's single use is the store's to check (one instance's memory
// would accept it once per instance), so the volume comes back as the
// fallback's, uncounted, for the send to refuse with 503, every time.
func TestDeadCountryNodeLeavesSolvedToTheStore(t *testing.T) {
	s := sendStore{nodeStore: newNodeStore(map[string]string{"+447911000001": "a", "198.51.100.7": "b", "GB": "c"}), volLimit: 8}
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: s, NodeOf: s.nodeOf, Instances: func() int { return 2 },
		Breaker: resilience.BreakerOptions{Failures: 3, OpenFor: time.Hour}})
	s.mu.Lock()
	s.down["c"] = true
	s.mu.Unlock()
	vol := volumeTake(false)
	vol.Solved = &guard.SolvedUse{Used: limit.Key{Space: "otp:vel", ID: "GB", Name: "solved:abc"}, TTL: time.Minute}
	for i := range 3 {
		_, vr, err := f.TakeSend(context.Background(), sendTakes()[:2], vol)
		if err != nil || vr == nil || !vr.Fallback || vr.Reused || vr.Count != 0 {
			t.Fatalf("solved send %d with the country's node dead: %+v, %v; want the fallback's uncounted volume (the send answers 503)", i, vr, err)
		}
	}
}
