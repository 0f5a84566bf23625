package opsweb

import (
	"time"

	"github.com/otpguard/otpguard/internal/ops"
)

// sheddingWithin is how recent the last shed request must be for the
// status to say the instance is shedding now: the page reloads every
// refreshEvery seconds, so a minute sees one or two reloads of it.
const sheddingWithin = time.Minute

// statusView is the badge at the top of the page (templates/status.html):
// the desk's status (ops.DeriveStatus) and the badge's colour.
type statusView struct {
	ops.Status
	Class string // ok, warn, bad: the page's badge classes
}

// loadStatus derives the page's status from the attack view, this
// instance's state, the overrides in force and whether the page's own
// reads found the database down. It runs after the other parts loaded.
func (s *Pages) loadStatus(p *opsPage) {
	st := s.view.instanceState()
	if p.Abuse != nil {
		st = p.Abuse.State
	}
	in := statusInput(st, p.Abuse, s.ops.Now())
	in.DatabaseDown = p.DatabaseDown
	in.PausedCountries, in.PausedCarriers = ops.PausedSubjects(s.ops.OverridesInForce(), s.ops.Now())
	p.Sections["status"] = newStatusView(ops.DeriveStatus(in))
}

// statusInput is what the attack view and the instance's state say of the
// states ops.DeriveStatus weighs; v may be nil (no attack view, or it
// failed to load).
func statusInput(st State, v *abuseJSON, now time.Time) ops.StatusInput {
	in := ops.StatusInput{RedisDown: st.Redis == "down", Breaker: st.Breaker, NodesDown: st.NodesDown, Masters: st.Masters,
		InFallback: st.InFallback, Database: st.Database,
		Shedding: !st.ShedAt.IsZero() && now.Sub(st.ShedAt) < sheddingWithin}
	if v == nil {
		return in
	}
	in.BudgetHourSpent, in.BudgetHourResets = v.Budget.Hour.Exhausted, time.Duration(v.Budget.Hour.ResetsIn)*time.Second
	in.BudgetDaySpent, in.BudgetDayResets = v.Budget.Day.Exhausted, time.Duration(v.Budget.Day.ResetsIn)*time.Second
	for _, a := range v.Alerts {
		in.Alerts = append(in.Alerts, a.Subject)
	}
	in.SolvedCapSpent = v.SolvedCapSpent
	return in
}

func newStatusView(st ops.Status) statusView {
	v := statusView{Status: st, Class: "ok"}
	switch st.Level {
	case ops.LevelRefusing:
		v.Class = "bad"
	case ops.LevelDegraded:
		v.Class = "warn"
	}
	return v
}
