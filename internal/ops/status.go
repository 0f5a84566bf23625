package ops

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The desk's status: one badge at the top of the ops page that is green
// only when nothing refuses or degrades sends or checks. It used to turn
// red for alerts and outages only, and so read "all systems normal" beside
// a spent budget that refused every send. Here every state the desk knows
// of that costs a real user a code is a Condition, ranked by how much it
// refuses; the badge names the worst and lists the rest.

// Level is how bad a condition is for the people waiting for codes.
type Level int

// The levels, from none to worst.
const (
	// LevelOK: nothing refuses or degrades sends.
	LevelOK Level = iota
	// LevelDegraded: sends go on, some slower, less exact or with fewer
	// places (the database, shedding, a solved cap, a carrier).
	LevelDegraded
	// LevelRefusing: some or all sends are refused (a budget, a pause, an
	// alert's block, an outage of the limits' store).
	LevelRefusing
)

// String is the level's name, as the page's badge class has it.
func (l Level) String() string {
	switch l {
	case LevelRefusing:
		return "refusing"
	case LevelDegraded:
		return "degraded"
	}
	return "ok"
}

// StatusInput is what the desk knows now of the states that refuse or
// degrade sends or checks. Zero values hold nothing.
type StatusInput struct {
	// Alerts are the abuse alerts firing (their subjects: "+2348031", "PK").
	Alerts []string
	// BudgetHourSpent and BudgetDaySpent: the spend budget's window is
	// exhausted; ResetsIn say for how long.
	BudgetHourSpent, BudgetDaySpent   bool
	BudgetHourResets, BudgetDayResets time.Duration
	// PausedCountries and PausedCarriers are the subjects of the pause
	// overrides in force ("NG", "NG/mtn").
	PausedCountries, PausedCarriers []string
	// SolvedCapSpent are the countries whose solved-challenge cap refused a
	// send this clock hour (AbuseReport.SolvedCapSpent: the solved tier's
	// refusals are counted apart from the velocity rule's, whose code they
	// share).
	SolvedCapSpent []string
	// RedisDown: the probe says Redis does not answer. Breaker is the
	// store breaker's state ("closed", "open", "half-open"; "" unknown).
	RedisDown bool
	Breaker   string
	// NodesDown are the Redis Cluster masters whose breaker is not closed
	// (open, or half-open: probed after an outage, its slots' decisions
	// still go to the fallback), and Masters how many masters the instance
	// knows (0: one node, a single Redis or Sentinel).
	NodesDown []string
	Masters   int
	// InFallback are the policies deciding from memory now.
	InFallback []string
	// Database is the ops database's state ("up", "down", "connecting";
	// "" not reported); DatabaseDown: the page's own reads failed on it.
	Database     string
	DatabaseDown bool
	// Shedding: this instance refused requests 503 overloaded lately.
	Shedding bool
}

// Condition is one state that refuses or degrades sends.
type Condition struct {
	Level Level
	// Code names the condition for tests and the page ("budget_hour").
	Code string
	// Text says what it does, for the badge and its list.
	Text string
	rank int
}

// Status is the desk's status: Level is the worst condition's, Conditions
// are all of them, worst first (empty: all is normal).
type Status struct {
	Level      Level
	Conditions []Condition
}

// Headline is what the badge says: the worst condition, or that all is
// normal.
func (s Status) Headline() string {
	if len(s.Conditions) == 0 {
		return "all systems normal"
	}
	return s.Conditions[0].Text
}

// Others are the conditions after the worst.
func (s Status) Others() []Condition {
	if len(s.Conditions) < 2 {
		return nil
	}
	return s.Conditions[1:]
}

// The ranks of the conditions: lower is worse. An outage of the limits'
// store refuses every closed policy's decision; a spent budget every send;
// a dead master the decisions of its slots; a pause a whole country or
// carrier; an alert a prefix or a country; the rest degrade.
const (
	rankRedisDown = iota
	rankBreakerOpen
	rankBudgetDay
	rankBudgetHour
	rankNodeDown
	rankCountryPaused
	rankAlert
	rankCarrierPaused
	rankSolvedCap
	rankFallback
	rankDatabase
	rankShedding
)

// DeriveStatus is the desk's status from what it knows now: green only
// when nothing in in refuses or degrades sends or checks.
func DeriveStatus(in StatusInput) Status {
	var cs []Condition
	add := func(rank int, l Level, code, text string) {
		cs = append(cs, Condition{Level: l, Code: code, Text: text, rank: rank})
	}
	// On Redis Cluster the breaker is the worst master's and the
	// heartbeat's key lives on one master: while some masters answer, a
	// dead one is node_down, not all of Redis down.
	partial := in.Masters > 0 && len(in.NodesDown) > 0 && len(in.NodesDown) < in.Masters
	storeDown := false // every decision takes its policy's on_store_error
	switch {
	case partial:
	case in.RedisDown:
		storeDown = true
		add(rankRedisDown, LevelRefusing, "redis_down", "Redis is down: decisions take each policy's on_store_error (OTP sends refused where closed)")
	case in.Breaker == "open":
		storeDown = true
		add(rankBreakerOpen, LevelRefusing, "breaker_open", "Redis breaker open: decisions take each policy's on_store_error (OTP sends refused where closed)")
	case in.Breaker == "half-open":
		add(rankBreakerOpen, LevelDegraded, "breaker_half_open", "Redis breaker half-open: probing Redis after an outage")
	}
	if in.BudgetDaySpent {
		add(rankBudgetDay, LevelRefusing, "budget_day", "Day budget spent: every send is refused"+resetsIn(in.BudgetDayResets))
	}
	if in.BudgetHourSpent {
		add(rankBudgetHour, LevelRefusing, "budget_hour", "Hour budget spent: every send is refused"+resetsIn(in.BudgetHourResets))
	}
	if len(in.NodesDown) > 0 {
		add(rankNodeDown, LevelRefusing, "node_down", "Redis Cluster master down: "+listOf(in.NodesDown)+"; its slots' decisions take the fallback")
	}
	if len(in.PausedCountries) > 0 {
		add(rankCountryPaused, LevelRefusing, "country_paused", "Paused: every send to "+listOf(in.PausedCountries)+" is refused")
	}
	if len(in.Alerts) > 0 {
		add(rankAlert, LevelRefusing, "alert", plural(len(in.Alerts), "abuse alert")+" firing: "+listOf(in.Alerts))
	}
	if len(in.PausedCarriers) > 0 {
		add(rankCarrierPaused, LevelRefusing, "carrier_paused", "Carrier paused: sends to "+listOf(in.PausedCarriers)+" are refused")
	}
	if len(in.SolvedCapSpent) > 0 {
		add(rankSolvedCap, LevelDegraded, "solved_cap", "Solved-challenge cap spent in "+listOf(in.SolvedCapSpent)+": challenged sends are refused this hour")
	}
	if len(in.InFallback) > 0 && !storeDown {
		add(rankFallback, LevelDegraded, "fallback", "In fallback: "+listOf(in.InFallback)+" decided from memory")
	}
	switch {
	case in.DatabaseDown || in.Database == "down":
		add(rankDatabase, LevelDegraded, "database_down", "Ops database down: deny-list and overrides changes wait; the last loaded stay in force")
	case in.Database == "connecting":
		add(rankDatabase, LevelDegraded, "database_connecting", "Ops database not reached yet: an empty deny-list is enforced until it loads")
	}
	if in.Shedding {
		add(rankShedding, LevelDegraded, "shedding", "Overloaded: this instance is shedding requests (503 overloaded)")
	}
	// Refusals before degradations (a half-open breaker ranks with an open
	// one, but refuses nothing), then by rank.
	slices.SortStableFunc(cs, func(a, b Condition) int {
		if a.Level != b.Level {
			return int(b.Level - a.Level)
		}
		return a.rank - b.rank
	})
	st := Status{Conditions: cs}
	for _, c := range cs {
		st.Level = max(st.Level, c.Level)
	}
	return st
}

// PausedSubjects splits the pause overrides in force at now by kind.
func PausedSubjects(list []guard.Override, now time.Time) (countries, carriers []string) {
	for _, o := range list {
		if !o.Active(now) {
			continue
		}
		switch o.Kind {
		case guard.OverrideCountryPause:
			countries = append(countries, o.Subject)
		case guard.OverrideCarrierPause:
			carriers = append(carriers, o.Subject)
		}
	}
	return countries, carriers
}

// listOf names up to three items: "NG, PK, ZA and 2 more".
func listOf(items []string) string {
	const n = 3
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(" and %d more", len(items)-n)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func resetsIn(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return " for " + d.Round(time.Second).String()
}

// OverridesInForce are the overrides this instance enforces now (its
// cache: known while the database is down too); nil without overrides.
func (d *Desk) OverridesInForce() []guard.Override {
	if d.o.OverrideCache == nil {
		return nil
	}
	return d.o.OverrideCache.ActiveOverrides()
}
