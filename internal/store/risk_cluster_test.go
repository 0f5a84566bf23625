package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// roomVolume is a send's volume take in room (a country's, "NG", or a
// named service's, "NG@VA..."; guard.RoomID) asking for the cached risk
// answer under risk, the country's hash tag: the velocity rule's (floor
// 1), or with solved the solved cap's (carrier: with its carrier's
// share; uncut: without the cuts).
func roomVolume(room string, risk limit.Key, solved, carrier, uncut bool, use string) guard.VolumeTake {
	h := time.Now().Unix() / 3600
	k := func(name string) limit.Key { return limit.Key{Space: "otp:vel", ID: room, Name: name} }
	v := guard.VolumeTake{Key: k("h"), Quarantine: k("quarantine"),
		Now: time.Unix(h*3600+60, 0), Hour: h, Lookback: 24, Floor: 1, QFloor: 1, Factor: 3, HistoryMinSends: 200, Risk: risk}
	if !solved {
		return v
	}
	v.Key, v.Quarantine = k("solved"), k("solvedcut")
	v.Solved = &guard.SolvedUse{Used: k("used:" + use), TTL: time.Minute, Base: k("h"), Uncut: uncut}
	if carrier {
		v.Carrier = guard.CarrierTake{Name: "MTN", Key: k("solved:c:mtn"), Cut: k("solvedcut:c:mtn"),
			Share: k("h:c:mtn"), Since: k("carriers"), FloorShare: 0.5}
	}
	return v
}

// TestClusterRiskOfAServiceRoom: the risk cache is every service's (the
// country's hash tag) while a named service's room carries the service in
// its tag. On Redis Cluster the two are in different slots: a send of
// such a room, by the velocity rule or the solved cap, with or without
// its carrier's share or the cuts, must neither fail (CROSSSLOT) nor
// claim to have read the cache (Risk.Read false: the guard reads it on
// its own). The default service's room shares the cache's slot and reads
// it with the count, and on a single Redis every room does. The cache is
// read with a service's trust mark (another slot) too.
func TestClusterRiskOfAServiceRoom(t *testing.T) {
	cl, _, _, cprefix := clusterStore(t)
	tg := redistest.New(t)
	single := store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix)
	ctx := context.Background()
	if err := cl.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	const service = "VA0123456789abcdef0123456789abcdef"
	room := guard.RoomID("NG", service)
	risk := limit.Key{Space: "otp:risk", ID: "NG", Name: "r1"}
	at := time.Unix(1_700_000_000, 0)
	a := guard.RiskAnswer{Score: 95, LineType: "mobile", At: at}
	found := guard.RiskCached{Read: true, Found: true, Answer: a}
	if store.Slot(cprefix+"otp:vel:{"+room+"}:h") == store.Slot(cprefix+"otp:risk:{NG}:r1") {
		t.Fatalf("room %s shares the cache's slot: pick another service", room)
	}
	for name, st := range map[string]*store.Redis{"cluster": cl, "single": single} {
		if err := st.Risks.CacheRisk(ctx, risk, a, time.Hour); err != nil {
			t.Fatal(err)
		}
		mark := limit.Key{Space: "otp:tr", ID: room, Name: "m1"}
		if _, err := st.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{{Key: mark}}, time.Hour); err != nil {
			t.Fatal(err)
		}
		got, err := st.Risks.CachedRisk(ctx, risk, mark)
		if err != nil {
			t.Errorf("%s: CachedRisk with a service's mark: %v", name, err)
		} else if diff := cmp.Diff(guard.RiskCached{Read: true, Found: true, Answer: a, Trusted: true}, got); diff != "" {
			t.Errorf("%s: CachedRisk with a service's mark (-want +got):\n%s", name, diff)
		}
	}
	cases := []struct {
		name                   string
		room                   string
		solved, carrier, uncut bool
		clusterRisk            guard.RiskCached // on Cluster; a single Redis reads found
	}{
		{"velocity, default room", "NG", false, false, false, found},
		{"velocity, service room", room, false, false, false, guard.RiskCached{}},
		{"solved, default room", "NG", true, false, false, found},
		{"solved, service room", room, true, false, false, guard.RiskCached{}},
		{"solved with carrier, service room", room, true, true, false, guard.RiskCached{}},
		{"solved uncut, service room", room, true, false, true, guard.RiskCached{}},
	}
	for _, tc := range cases {
		for name, st := range map[string]*store.Redis{"cluster": cl, "single": single} {
			want := found
			if name == "cluster" {
				want = tc.clusterRisk
			}
			// Floor 1: the first send is allowed, the second refused
			// (the refusal is the one that asks for the score).
			for i, allowed := range []bool{true, false} {
				v := roomVolume(tc.room, risk, tc.solved, tc.carrier, tc.uncut, fmt.Sprintf("%s%d", tc.name, i))
				// Room keys of their own per case: each case starts at 0.
				v.Key.Name += ":" + tc.name
				v.Quarantine.Name += ":" + tc.name
				if v.Solved != nil {
					v.Solved.Base.Name += ":" + tc.name
				}
				res, vres, err := st.Counters.TakeSend(ctx, nil, &v)
				if err != nil {
					t.Errorf("%s, %s, send %d: %v", tc.name, name, i+1, err)
					continue
				}
				if len(res) != 0 || vres == nil || vres.Allowed != allowed {
					t.Errorf("%s, %s, send %d: %v %+v, want allowed %t", tc.name, name, i+1, res, vres, allowed)
					continue
				}
				if diff := cmp.Diff(want, vres.Risk); diff != "" {
					t.Errorf("%s, %s, send %d: risk (-want +got):\n%s", tc.name, name, i+1, diff)
				}
			}
		}
	}
}
