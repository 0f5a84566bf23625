package httpapi

import (
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/resilience"
)

// TestInstanceStateNodes: the masters the desk's status counts down are
// those whose breaker is not closed (half-open is an outage being probed),
// out of the named masters; "*" (calls across masters) and the one node of
// a single Redis are no master.
func TestInstanceStateNodes(t *testing.T) {
	tests := []struct {
		name        string
		nodes       []resilience.NodeStatus
		wantDown    []string
		wantMasters int
	}{
		{"a single Redis, its breaker open", []resilience.NodeStatus{{Node: "", Breaker: "open"}}, nil, 0},
		{"a cluster, all closed", []resilience.NodeStatus{{Node: "a:1", Breaker: "closed"}, {Node: "b:1", Breaker: "closed"}}, nil, 2},
		{"one open, one probed, the cross-master calls' open", []resilience.NodeStatus{{Node: "*", Breaker: "open"},
			{Node: "a:1", Breaker: "open"}, {Node: "b:1", Breaker: "half-open"}, {Node: "c:1", Breaker: "closed"}}, []string{"a:1", "b:1"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := health{shed: new(atomic.Int64), shedAt: new(atomic.Int64), status: func() StoreStatus {
				return StoreStatus{RedisUp: true, FallbackStatus: resilience.FallbackStatus{Breaker: "closed", Nodes: tt.nodes}}
			}}
			st := h.instanceState()
			if diff := cmp.Diff(tt.wantDown, st.NodesDown); diff != "" || st.Masters != tt.wantMasters {
				t.Errorf("masters: got %d, want %d; down (-want +got):\n%s", st.Masters, tt.wantMasters, diff)
			}
		})
	}
}
