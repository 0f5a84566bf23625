package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// clusterVolume is a send's volume take for country NG on the caller's
// clock: the new tier's floor 1, the trusted tier's 10.
func clusterVolume(mark limit.Key, trusted bool) *guard.VolumeTake {
	h := time.Now().Unix() / 3600
	return &guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "NG", Name: "h"},
		Quarantine: limit.Key{Space: "otp:vel", ID: "NG", Name: "quarantine"},
		Now:        time.Unix(h*3600+60, 0), Hour: h, Lookback: 24, Floor: 1, QFloor: 1, Factor: 3,
		Trusted: trusted, Mark: mark, TrustedKey: limit.Key{Space: "otp:vel", ID: "NG", Name: "t"}, TFloor: 10, TFactor: 3}
}

// TestClusterTrustedSend: on Redis Cluster a marked number's send is not
// refused by an automatic rule (a full prefix window, in another slot):
// the mark is read first, the automatic take is neither taken nor
// refused, and the count goes to the trusted tier; an unmarked number's
// send is refused by the prefix window and takes no volume.
func TestClusterTrustedSend(t *testing.T) {
	st, _, _, _ := clusterStore(t)
	ctx := context.Background()
	mark := limit.Key{Space: "otp:tr", ID: "NG", Name: "marked"}
	if _, err := st.MarkTrusted(ctx, []guard.TrustMark{{Key: mark}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	prefix := limit.Take{Key: limit.Key{Space: "otp:prefix", ID: "+234803", Name: "sends"}, Algorithm: limit.FixedWindow,
		Limit: 1, Window: time.Minute, Cost: 1, Automatic: true}
	if _, err := st.Take(ctx, []limit.Take{prefix}); err != nil { // the window is full
		t.Fatal(err)
	}
	cases := []struct {
		name                    string
		mark                    limit.Key
		prefixAllowed, trusted  bool
		volumeTaken, volCounted bool
	}{
		{"marked", mark, true, true, true, true},
		{"unmarked", limit.Key{Space: "otp:tr", ID: "NG", Name: "other"}, false, false, false, false},
	}
	for _, tc := range cases {
		res, vres, err := st.TakeSend(ctx, []limit.Take{prefix}, clusterVolume(tc.mark, false))
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Allowed != tc.prefixAllowed || (tc.trusted && res[0].Spent) {
			t.Errorf("%s: prefix window %+v, want allowed %v (and not spent when trusted)", tc.name, res[0], tc.prefixAllowed)
		}
		if vres == nil || vres.Trusted != tc.trusted || (vres.Count == 1) != tc.volCounted {
			t.Errorf("%s: volume %+v, want trusted %v counted %v", tc.name, vres, tc.trusted, tc.volCounted)
		}
	}
}

// TestClusterTrustedTierExact: 40 concurrent trusted sends of one country
// through two cluster clients (two instances): exactly the trusted tier's
// floor (10) are allowed.
func TestClusterTrustedTierExact(t *testing.T) {
	_, _, _, prefix := clusterStore(t)
	stores := make([]*store.Redis, 2)
	for i := range stores {
		u, err := store.NewUniversalClient(store.RedisOptions{Mode: store.RedisCluster, Addrs: redistest.SharedCluster(t).Addrs(), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		stores[i] = store.NewClusterRedis(u, prefix)
	}
	ctx := context.Background()
	mark := limit.Key{Space: "otp:tr", ID: "NG", Name: "marked"}
	if _, err := stores[0].MarkTrusted(ctx, []guard.TrustMark{{Key: mark}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			v := clusterVolume(mark, i%2 == 0) // half known trusted, half by their mark
			_, vres, err := stores[i%2].TakeSend(ctx, nil, v)
			if err != nil {
				t.Error(err)
				return
			}
			if vres.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 10 {
		t.Errorf("trusted sends allowed: %d, want exactly 10", got)
	}
}
