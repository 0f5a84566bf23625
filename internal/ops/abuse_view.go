package ops

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// DefaultAbuseTop and MaxAbuseTop bound the country and prefix rows of one
// window of the attack view.
const (
	DefaultAbuseTop = 10
	MaxAbuseTop     = 50
)

// AbuseDeskOptions configure an AbuseDesk.
type AbuseDeskOptions struct {
	Store  AbuseCounters
	Policy func() guard.OTPPolicy
	// Overrides are the emergency overrides this instance enforces
	// (OverrideCache): the limits shown are those a send meets, tightened
	// by them as the send path does (guard.Enforced). nil: none.
	Overrides guard.Overrides
	Deny      *DenyCache // the automatic blocks; nil: none listed
	// Services are the policy file's services in force; nil or none: the
	// view has no service rows (abuse_services.go).
	Services func() []guard.Service
	Now      func() time.Time
}

// AbuseDesk reads the attack view: two store round trips per view (the
// counters of 24 hours, the alerts and the budget; then the velocity
// state of the countries shown), and a third with challenges on (the
// solved caps of the rows shown), whatever the traffic.
type AbuseDesk struct{ o AbuseDeskOptions }

// NewAbuseDesk returns the attack view's reader.
func NewAbuseDesk(o AbuseDeskOptions) *AbuseDesk {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &AbuseDesk{o: o}
}

// Tally is sends, refusals and verifications of one subject.
type AbuseTally struct {
	Sends, Refusals, Verifications int64
	// ByCode counts the refusals by their problem code (countries and
	// totals only).
	ByCode map[string]int64
	// Trusted counts the sends to trusted numbers, among Sends (countries
	// and totals only; guard/trust.go).
	Trusted int64
	// RiskLookups counts the risk score lookups asked (countries and
	// totals only; guard/riskstep.go).
	RiskLookups int64
	// Solved counts the sends after a solved challenge, among Sends, and
	// SolvedCapped the sends the solved cap refused, among Refusals
	// (their code is unusual_volume; abuse_solved.go).
	Solved, SolvedCapped int64
}

// CodeChallengeRequired is the refusal code of a send answered with a
// challenge (428): the view's "challenged" column.
const CodeChallengeRequired = "challenge_required"

// Challenged is the sends answered with a challenge, among Refusals.
func (t AbuseTally) Challenged() int64 { return t.ByCode[CodeChallengeRequired] }

// ConversionRate is verifications / sends; ok is false when nothing was sent.
func (t AbuseTally) ConversionRate() (float64, bool) {
	if t.Sends == 0 {
		return 0, false
	}
	return float64(t.Verifications) / float64(t.Sends), true
}

func (t *AbuseTally) add(kind string, n int64) {
	switch {
	case kind == "s":
		t.Sends += n
	case kind == "v":
		t.Verifications += n
	case kind == "t":
		t.Trusted += n
	case kind == "k":
		t.RiskLookups += n
	case kind == kindSolved:
		t.Solved += n
	case kind == kindSolvedCap:
		t.SolvedCapped += n
	case kind == "r":
		t.Refusals += n
	case strings.HasPrefix(kind, "r:"):
		if t.ByCode == nil {
			t.ByCode = map[string]int64{}
		}
		t.ByCode[kind[2:]] += n
	}
}

// AbuseLimit is a limit that applies to a row.
type AbuseLimit struct {
	Rule   string        // per_prefix, prefix_depths[0], per_country, country_velocity
	Limit  int64         // 0: not known yet
	Window time.Duration // the window; for country_velocity the clock hour
	// Count is the counter now, where the view reads it (country velocity).
	Count       int64
	Quarantined bool
	// Override is true when an emergency override of the ops desk sets
	// Limit (guard.InForce).
	Override bool
}

// CountryRow is one country of a window.
type CountryRow struct {
	Country string // ISO region, "001" non-geographic, "~other" past the cap
	AbuseTally
	Limits []AbuseLimit
	// Carriers are the country's carriers, busiest first (abuse_carriers.go).
	Carriers []CarrierRow
	// PausedUntil is when the ops desk's country_pause of the country
	// ends (zero: not paused), so that the row says what refuses it.
	PausedUntil time.Time
	// SolvedCapSpent: the solved cap refused a send to the country in the
	// clock hour under way (abuse_solved.go).
	SolvedCapSpent bool
	// SolvedCap is the solved cap in force on the country this clock
	// hour; nil when challenges are off or it was not read.
	SolvedCap *SolvedCap
}

// PrefixRow is one prefix of a window.
type PrefixRow struct {
	Prefix  string
	Country string
	Depth   int
	AbuseTally
	Limit AbuseLimit
}

// AbuseWindow is one window of the view: the last hour or the last day.
type AbuseWindow struct {
	Name  string // "hour" or "day"
	Since time.Time
	Total AbuseTally
	// Countries and Prefixes are the top rows by sends + refusals, and how
	// many there were in all.
	Countries      []CountryRow
	CountriesTotal int
	Prefixes       []PrefixRow
	PrefixesTotal  int
	// Services are each service's rows (abuse_services.go); none when the
	// policy file names no service.
	Services []ServiceRow
}

// BudgetState is one spend budget window.
type BudgetState struct {
	Window    string // "hour" or "day"
	Limit     int64  // 0: off
	Override  bool   // an emergency override sets Limit
	Used      int64
	Exhausted bool
	ResetsIn  time.Duration
}

// AbuseReport is the attack view.
type AbuseReport struct {
	At         time.Time
	Budget     []BudgetState
	Windows    []AbuseWindow
	Alerts     []AbuseAlert
	AutoBlocks []guard.DenyEntry
	// SolvedCapSpent are the countries whose solved cap refused a send in
	// the clock hour under way, sorted: all of them, not only the rows
	// shown (the desk's status names them; abuse_solved.go).
	SolvedCapSpent []string
}

// Read builds the view: the last hour is the clock hour under way and the
// one before it when the hour is young (at least 60 minutes of counts), the
// last day the 24 clock hours up to now.
func (d *AbuseDesk) Read(ctx context.Context, top int) (AbuseReport, error) {
	if top <= 0 {
		top = DefaultAbuseTop
	}
	top = min(top, MaxAbuseTop)
	now := d.o.Now()
	p := d.o.Policy()
	e := guard.EnforcedAt(p, d.o.Overrides, now)
	cur := now.Unix() / 3600
	hours := make([]int64, 0, 25)
	for h := cur; h > cur-25; h-- {
		hours = append(hours, h)
	}
	data, err := d.o.Store.ReadAbuse(ctx, hours)
	if err != nil {
		return AbuseReport{}, limit.StoreUnavailable(err, 5*time.Second)
	}
	rep := AbuseReport{At: now, Budget: budgetStates(data, e)}
	// The last hour: the hour under way and the previous one (counts of the
	// clock hour: between 60 and 120 minutes); the last day: 24 hours.
	// The solved cap is per clock hour: what it refused in the hour under
	// way marks the rows of both windows.
	spent, spentCarriers := solvedSpentNow(data.Hours[0])
	rep.Windows = []AbuseWindow{
		window("hour", data.Hours[:2], time.Unix((cur-1)*3600, 0), top, p, e, spent, spentCarriers),
		window("day", data.Hours[:24], time.Unix((cur-23)*3600, 0), top, p, e, spent, spentCarriers),
	}
	if d.o.Services != nil {
		services := d.o.Services()
		rep.Windows[0].Services = serviceRows(data.Hours[:2], services, top)
		rep.Windows[1].Services = serviceRows(data.Hours[:24], services, top)
	}
	if err := d.addVelocityLimits(ctx, rep.Windows, p, now); err != nil {
		return AbuseReport{}, err
	}
	if err := d.addSolvedCaps(ctx, rep.Windows, p, now); err != nil {
		return AbuseReport{}, err
	}
	rep.Alerts = liveAlerts(data.Alerts, now)
	for c := range spent {
		rep.SolvedCapSpent = append(rep.SolvedCapSpent, c)
	}
	slices.Sort(rep.SolvedCapSpent)
	rep.AutoBlocks = d.autoBlocks(now)
	return rep, nil
}

// budgetStates are the spend budget's windows: what was used against the
// limit in force (e).
func budgetStates(data AbuseData, e guard.Enforced) []BudgetState {
	var out []BudgetState
	for _, b := range []struct {
		name string
		w    BudgetWindow
	}{{"hour", data.BudgetHr}, {"day", data.BudgetDay}} {
		l := e.Budget(b.name)
		out = append(out, BudgetState{Window: b.name, Limit: l.Limit, Override: l.Override, Used: b.w.Used,
			Exhausted: l.Limit > 0 && b.w.Used >= l.Limit, ResetsIn: b.w.ResetsIn})
	}
	return out
}

// addVelocityLimits adds the country velocity limit to each country row of
// windows, when the rule is enforced, in one more round trip.
func (d *AbuseDesk) addVelocityLimits(ctx context.Context, windows []AbuseWindow, p guard.OTPPolicy, now time.Time) error {
	var regions []string
	for _, w := range windows {
		for _, c := range w.Countries {
			if c.Country != OtherField && !slices.Contains(regions, c.Country) {
				regions = append(regions, c.Country)
			}
		}
	}
	if p.CountryVelocity.Mode != guard.VelocityEnforce || len(regions) == 0 {
		return nil
	}
	vols, err := d.o.Store.ReadVolumes(ctx, regions, guard.VelocityHour(now.Unix()))
	if err != nil {
		return limit.StoreUnavailable(err, 5*time.Second)
	}
	for wi := range windows {
		rows := windows[wi].Countries
		for ci, c := range rows {
			if i := slices.Index(regions, c.Country); i >= 0 {
				rows[ci].Limits = append(rows[ci].Limits, velocityLimit(p.CountryVelocity, c.Country, vols[i], now))
			}
		}
	}
	return nil
}

// velocityLimit is the country velocity limit of country as v reads it.
func velocityLimit(cv guard.CountryVelocity, country string, v CountryVolume, now time.Time) AbuseLimit {
	q := v.QuarantineUntil.After(now)
	l := AbuseLimit{Rule: "country_velocity", Window: time.Hour, Count: v.Sends, Quarantined: q}
	fl := cv.FloorFor(country, q)
	l.Limit = fl
	if v.Baseline >= 0 {
		l.Limit = max(fl, int64(cv.Factor*float64(v.Baseline)+1e-9))
	}
	return l
}

// liveAlerts are the alerts not ended at now, newest first, then by name:
// the same order on every instance.
func liveAlerts(alerts []AbuseAlert, now time.Time) []AbuseAlert {
	var out []AbuseAlert
	for _, a := range alerts {
		if a.Until.After(now) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b AbuseAlert) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Rule+"|"+a.Scope+"|"+a.Subject+"|"+a.Service, b.Rule+"|"+b.Scope+"|"+b.Subject+"|"+b.Service)
	})
	return out
}

// autoBlocks are the conversion watch's blocks still in force at now.
func (d *AbuseDesk) autoBlocks(now time.Time) []guard.DenyEntry {
	if d.o.Deny == nil {
		return nil
	}
	var out []guard.DenyEntry
	for _, e := range d.o.Deny.Entries() {
		if e.Author == guard.ConversionActor && !e.Expired(now) {
			out = append(out, e)
		}
	}
	return out
}
