package resilience_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// trustNodeStore is a nodeStore that also takes a send's volume count
// (counted, in the trusted tier when the take says so) and keeps marks.
type trustNodeStore struct {
	*nodeStore
	marks map[limit.Key]bool
}

func (s *trustNodeStore) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	res, err := s.Take(ctx, takes)
	if err != nil || vol == nil {
		return res, nil, err
	}
	trusted := vol.Trusted || s.marks[vol.Mark]
	return res, &guard.VolumeResult{Allowed: true, Count: 1, Trusted: trusted}, nil
}

func (s *trustNodeStore) MarkTrusted(context.Context, []guard.TrustMark, time.Duration) (guard.Marked, error) {
	return guard.Marked{}, nil
}

func (s *trustNodeStore) Trusted(_ context.Context, mark limit.Key, _ time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, []string{s.of[mark.ID]})
	return s.marks[mark], nil
}

// TestTrustedSendByNode: on Cluster a marked number's send is not refused
// by a full automatic window on an earlier node (the mark is read first,
// on the volume's node): the window is answered allowed and not counted,
// and the volume is taken as trusted. An unmarked number's send is
// refused by the window and takes no volume.
func TestTrustedSendByNode(t *testing.T) {
	ns := newNodeStore(map[string]string{"+447911000001": "a", "+4479": "b", "GB": "c"})
	mark := limit.Key{Space: "otp:tr", ID: "GB", Name: "marked"}
	s := &trustNodeStore{nodeStore: ns, marks: map[limit.Key]bool{mark: true}}
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: s, NodeOf: ns.nodeOf,
		Breaker: resilience.BreakerOptions{Failures: 3, OpenFor: time.Hour}})
	own := limit.Take{Key: limit.Key{Space: "otp", ID: "+447911000001", Name: "sends"}, Algorithm: limit.FixedWindow,
		Limit: 10, Window: time.Minute, Cost: 1, Policy: guard.OTPPolicyName, OnStoreError: limit.FallbackClosed}
	prefix := limit.Take{Key: limit.Key{Space: "otp:prefix", ID: "+4479", Name: "sends"}, Algorithm: limit.FixedWindow,
		Limit: 1, Window: time.Minute, Cost: 1, Policy: guard.OTPPolicyName, OnStoreError: limit.FallbackOpen, Automatic: true}
	ctx := context.Background()
	if _, err := f.Take(ctx, []limit.Take{prefix}); err != nil { // the window is full
		t.Fatal(err)
	}
	vol := func(m limit.Key) *guard.VolumeTake {
		return &guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "GB", Name: "h"}, Mark: m}
	}
	res, vr, err := f.TakeSend(ctx, []limit.Take{own, prefix}, vol(mark))
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Allowed || !res[1].Allowed || res[1].Spent || vr == nil || !vr.Trusted {
		t.Errorf("marked: %+v, volume %+v; want allowed, the window not spent, trusted", res, vr)
	}
	if c := ns.count("+4479"); c != 1 {
		t.Errorf("the window holds %d, want 1 (the trusted send not counted)", c)
	}
	res, vr, err = f.TakeSend(ctx, []limit.Take{own, prefix}, vol(limit.Key{Space: "otp:tr", ID: "GB", Name: "other"}))
	if err != nil {
		t.Fatal(err)
	}
	if res[1].Allowed || (vr != nil && vr.Allowed) {
		t.Errorf("unmarked: %+v, volume %+v; want refused by the window, no volume", res, vr)
	}
}
