package ops_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

func TestDeriveStatus(t *testing.T) {
	tests := []struct {
		name      string
		in        ops.StatusInput
		wantLevel ops.Level
		wantCodes []string // worst first
	}{
		{"nothing holds", ops.StatusInput{Breaker: "closed", Database: "up"}, ops.LevelOK, nil},
		{"an alert", ops.StatusInput{Alerts: []string{"+2348031"}}, ops.LevelRefusing, []string{"alert"}},
		{"the hour's budget spent, no alert", ops.StatusInput{BudgetHourSpent: true, Breaker: "closed"}, ops.LevelRefusing, []string{"budget_hour"}},
		{"the day's budget spent", ops.StatusInput{BudgetDaySpent: true}, ops.LevelRefusing, []string{"budget_day"}},
		{"a country paused", ops.StatusInput{PausedCountries: []string{"NG"}}, ops.LevelRefusing, []string{"country_paused"}},
		{"a carrier paused", ops.StatusInput{PausedCarriers: []string{"NG/mtn"}}, ops.LevelRefusing, []string{"carrier_paused"}},
		{"a solved cap spent", ops.StatusInput{SolvedCapSpent: []string{"NG"}}, ops.LevelDegraded, []string{"solved_cap"}},
		{"the breaker open", ops.StatusInput{Breaker: "open", InFallback: []string{"otp"}}, ops.LevelRefusing, []string{"breaker_open"}},
		{"the breaker half-open", ops.StatusInput{Breaker: "half-open"}, ops.LevelDegraded, []string{"breaker_half_open"}},
		{"Redis down", ops.StatusInput{RedisDown: true, Breaker: "open"}, ops.LevelRefusing, []string{"redis_down"}},
		{"a cluster master dead", ops.StatusInput{Breaker: "closed", NodesDown: []string{"10.0.0.3:7001"}, InFallback: []string{"otp"}},
			ops.LevelRefusing, []string{"node_down", "fallback"}},
		{"a dead master of three, the heartbeat's", ops.StatusInput{RedisDown: true, Breaker: "open", NodesDown: []string{"n1"}, Masters: 3,
			InFallback: []string{"otp"}}, ops.LevelRefusing, []string{"node_down", "fallback"}},
		{"a dead master probed (half-open)", ops.StatusInput{Breaker: "half-open", NodesDown: []string{"n1"}, Masters: 3},
			ops.LevelRefusing, []string{"node_down"}},
		{"every master dead", ops.StatusInput{RedisDown: true, Breaker: "open", NodesDown: []string{"n1", "n2", "n3"}, Masters: 3,
			InFallback: []string{"otp"}}, ops.LevelRefusing, []string{"redis_down", "node_down"}},
		{"the cross-master breaker open, every master up", ops.StatusInput{Breaker: "open", Masters: 3}, ops.LevelRefusing, []string{"breaker_open"}},
		{"the database down", ops.StatusInput{Database: "down"}, ops.LevelDegraded, []string{"database_down"}},
		{"the page's database reads failed", ops.StatusInput{Database: "up", DatabaseDown: true}, ops.LevelDegraded, []string{"database_down"}},
		{"the database connecting", ops.StatusInput{Database: "connecting"}, ops.LevelDegraded, []string{"database_connecting"}},
		{"shedding", ops.StatusInput{Shedding: true}, ops.LevelDegraded, []string{"shedding"}},
		{"everything, worst first", ops.StatusInput{Shedding: true, Database: "down", SolvedCapSpent: []string{"NG"},
			PausedCarriers: []string{"NG/mtn"}, Alerts: []string{"PK"}, PausedCountries: []string{"PK"}, NodesDown: []string{"n1"},
			BudgetHourSpent: true, BudgetDaySpent: true, Breaker: "open"}, ops.LevelRefusing,
			[]string{"breaker_open", "budget_day", "budget_hour", "node_down", "country_paused", "alert", "carrier_paused", "solved_cap", "database_down", "shedding"}},
		{"the breaker half-open below a spent budget", ops.StatusInput{Breaker: "half-open", BudgetHourSpent: true}, ops.LevelRefusing,
			[]string{"budget_hour", "breaker_half_open"}},
		{"degraded below a refusal", ops.StatusInput{Shedding: true, PausedCarriers: []string{"NG/mtn"}}, ops.LevelRefusing,
			[]string{"carrier_paused", "shedding"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ops.DeriveStatus(tt.in)
			var codes []string
			for _, c := range got.Conditions {
				codes = append(codes, c.Code)
			}
			if got.Level != tt.wantLevel {
				t.Errorf("level: got %s, want %s", got.Level, tt.wantLevel)
			}
			if diff := cmp.Diff(tt.wantCodes, codes); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if tt.wantLevel == ops.LevelOK && got.Headline() != "all systems normal" {
				t.Errorf("headline: got %q, want all systems normal", got.Headline())
			}
			if tt.wantLevel != ops.LevelOK && got.Headline() == "all systems normal" {
				t.Errorf("headline: all systems normal at level %s", got.Level)
			}
		})
	}
}

func TestPausedSubjects(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	list := []guard.Override{
		{Kind: guard.OverrideCountryPause, Subject: "NG", ExpiresAt: now.Add(time.Hour)},
		{Kind: guard.OverrideCountryPause, Subject: "PK", ExpiresAt: now.Add(-time.Second)}, // expired
		{Kind: guard.OverrideCarrierPause, Subject: "NG/mtn", ExpiresAt: now.Add(time.Hour)},
		{Kind: guard.OverrideCountryLimit, Subject: "ZA", Limit: 5, ExpiresAt: now.Add(time.Hour)},
	}
	countries, carriers := ops.PausedSubjects(list, now)
	if diff := cmp.Diff([]string{"NG"}, countries); diff != "" {
		t.Errorf("countries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"NG/mtn"}, carriers); diff != "" {
		t.Errorf("carriers (-want +got):\n%s", diff)
	}
}
