package opsweb

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/ops"
)

// TestStatusInput: what the instance's state and the attack view say
// reaches ops.DeriveStatus: a recent shed, a dead master (the heartbeat's
// too: not all of Redis), the budgets, the alerts, the solved cap spent;
// an old shed does not.
func TestStatusInput(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	view := &abuseJSON{Budget: abuseBudgetJSON{Hour: abuseBudgetWindowJSON{Exhausted: true, ResetsIn: 60}},
		Alerts: []abuseAlertJSON{{Subject: "PK"}}}
	tests := []struct {
		name string
		st   State
		v    *abuseJSON
		want []string
	}{
		{"all well", State{Redis: "up", Breaker: "closed", Database: "up"}, nil, nil},
		{"shed a moment ago", State{Redis: "up", Breaker: "closed", ShedAt: now.Add(-10 * time.Second)}, nil, []string{"shedding"}},
		{"shed long ago", State{Redis: "up", Breaker: "closed", ShedAt: now.Add(-time.Hour)}, nil, nil},
		{"a dead master", State{Redis: "up", Breaker: "closed", NodesDown: []string{"10.0.0.3:7001"}}, nil, []string{"node_down"}},
		{"the heartbeat's master dead", State{Redis: "down", Breaker: "open", NodesDown: []string{"10.0.0.3:7001"}, Masters: 3}, nil, []string{"node_down"}},
		{"Redis down", State{Redis: "down", Breaker: "open"}, nil, []string{"redis_down"}},
		{"every master dead", State{Redis: "down", Breaker: "open", NodesDown: []string{"a:1", "b:1", "c:1"}, Masters: 3}, nil,
			[]string{"redis_down", "node_down"}},
		{"the database connecting", State{Redis: "up", Breaker: "closed", Database: "connecting"}, nil, []string{"database_connecting"}},
		{"the attack view's budget and alert", State{Redis: "up", Breaker: "closed"}, view, []string{"budget_hour", "alert"}},
		{"the solved cap spent", State{Redis: "up", Breaker: "closed"}, &abuseJSON{SolvedCapSpent: []string{"NG"}}, []string{"solved_cap"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range ops.DeriveStatus(statusInput(tt.st, tt.v, now)).Conditions {
				got = append(got, c.Code)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}
