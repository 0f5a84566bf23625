package ops

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
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
	Now       func() time.Time
}

// AbuseDesk reads the attack view: two store round trips per view (the
// counters of 24 hours, the alerts and the budget; then the velocity
// state of the countries shown), whatever the traffic.
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
}

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
		return AbuseReport{}, guard.StoreUnavailable(err, 5*time.Second)
	}
	rep := AbuseReport{At: now}
	for _, b := range []struct {
		name string
		w    BudgetWindow
	}{{"hour", data.BudgetHr}, {"day", data.BudgetDay}} {
		l := e.Budget(b.name)
		rep.Budget = append(rep.Budget, BudgetState{Window: b.name, Limit: l.Limit, Override: l.Override, Used: b.w.Used,
			Exhausted: l.Limit > 0 && b.w.Used >= l.Limit, ResetsIn: b.w.ResetsIn})
	}
	// The last hour: the hour under way and the previous one (counts of the
	// clock hour: between 60 and 120 minutes); the last day: 24 hours.
	rep.Windows = []AbuseWindow{
		d.window("hour", data.Hours[:2], time.Unix((cur-1)*3600, 0), top, p, e),
		d.window("day", data.Hours[:24], time.Unix((cur-23)*3600, 0), top, p, e),
	}
	// The velocity limits of the countries shown, in one more round trip.
	var regions []string
	for _, w := range rep.Windows {
		for _, c := range w.Countries {
			if c.Country != OtherField && !slices.Contains(regions, c.Country) {
				regions = append(regions, c.Country)
			}
		}
	}
	if p.CountryVelocity.Mode == guard.VelocityEnforce && len(regions) > 0 {
		vols, err := d.o.Store.ReadVolumes(ctx, regions, guard.VelocityHour(now.Unix()))
		if err != nil {
			return AbuseReport{}, guard.StoreUnavailable(err, 5*time.Second)
		}
		for wi := range rep.Windows {
			for ci, c := range rep.Windows[wi].Countries {
				i := slices.Index(regions, c.Country)
				if i < 0 {
					continue
				}
				v := vols[i]
				q := v.QuarantineUntil.After(now)
				l := AbuseLimit{Rule: "country_velocity", Window: time.Hour, Count: v.Sends, Quarantined: q}
				fl := p.CountryVelocity.FloorFor(c.Country, q)
				l.Limit = fl
				if v.Baseline >= 0 {
					l.Limit = max(fl, int64(p.CountryVelocity.Factor*float64(v.Baseline)+1e-9))
				}
				rep.Windows[wi].Countries[ci].Limits = append(rep.Windows[wi].Countries[ci].Limits, l)
			}
		}
	}
	for _, a := range data.Alerts {
		if a.Until.After(now) {
			rep.Alerts = append(rep.Alerts, a)
		}
	}
	slices.SortFunc(rep.Alerts, func(a, b AbuseAlert) int { // newest first, then by name: the same on every instance
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Rule+"|"+a.Scope+"|"+a.Subject, b.Rule+"|"+b.Scope+"|"+b.Subject)
	})
	if d.o.Deny != nil {
		for _, e := range d.o.Deny.Entries() {
			if e.Author == guard.ConversionActor && !e.Expired(now) {
				rep.AutoBlocks = append(rep.AutoBlocks, e)
			}
		}
	}
	return rep, nil
}

// window sums the counts of hours into the top rows, each with the limit
// that applies to it now (e).
func (d *AbuseDesk) window(name string, hours []AbuseHour, since time.Time, top int, p guard.OTPPolicy, e guard.Enforced) AbuseWindow {
	w := AbuseWindow{Name: name, Since: since}
	countries := map[string]*CountryRow{}
	prefixes := map[string]*PrefixRow{}
	depths := p.PrefixLimits()
	for _, h := range hours {
		for f, n := range h.Countries {
			region, kind, ok := strings.Cut(f, "|")
			if !ok {
				continue
			}
			r := countries[region]
			if r == nil {
				r = &CountryRow{Country: region}
				countries[region] = r
			}
			r.add(kind, n)
			w.Total.add(kind, n)
		}
		for f, n := range h.Prefixes {
			parts := strings.Split(f, "|")
			var key string
			var row PrefixRow
			switch {
			case len(parts) == 2 && parts[0] == OtherField:
				key, row = OtherField, PrefixRow{Prefix: OtherField, Depth: -1}
			case len(parts) == 4:
				depth, err := strconv.Atoi(parts[2])
				if err != nil {
					continue
				}
				key, row = parts[0]+"|"+parts[2], PrefixRow{Prefix: parts[0], Country: parts[1], Depth: depth}
			default:
				continue
			}
			r := prefixes[key]
			if r == nil {
				r = &row
				if row.Depth >= 0 && row.Depth < len(depths) {
					if l := e.Prefix(row.Prefix, depths[row.Depth]); l.Limit > 0 {
						r.Limit = AbuseLimit{Rule: depthRule(row.Depth), Limit: l.Limit, Window: l.Window, Override: l.Override}
					}
				}
				prefixes[key] = r
			}
			r.add(parts[len(parts)-1], n)
		}
	}
	for _, r := range countries {
		if r.Country != OtherField {
			if l, key := e.Country(r.Country); l.Limit > 0 {
				rule := "per_country" // the country's own, or only an override's
				if key == "*" {
					rule = `per_country["*"]`
				}
				r.Limits = append(r.Limits, AbuseLimit{Rule: rule, Limit: l.Limit, Window: l.Window, Override: l.Override})
			}
		}
		w.Countries = append(w.Countries, *r)
	}
	for _, r := range prefixes {
		w.Prefixes = append(w.Prefixes, *r)
	}
	busy := func(t AbuseTally) int64 { return t.Sends + t.Refusals }
	slices.SortFunc(w.Countries, func(a, b CountryRow) int {
		if c := busy(b.AbuseTally) - busy(a.AbuseTally); c != 0 {
			return sign(c)
		}
		return strings.Compare(a.Country, b.Country)
	})
	slices.SortFunc(w.Prefixes, func(a, b PrefixRow) int {
		if c := busy(b.AbuseTally) - busy(a.AbuseTally); c != 0 {
			return sign(c)
		}
		if c := strings.Compare(a.Prefix, b.Prefix); c != 0 {
			return c
		}
		return a.Depth - b.Depth
	})
	w.CountriesTotal, w.PrefixesTotal = len(w.Countries), len(w.Prefixes)
	w.Countries = w.Countries[:min(top, len(w.Countries))]
	w.Prefixes = w.Prefixes[:min(top, len(w.Prefixes))]
	return w
}

func sign(n int64) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func depthRule(depth int) string {
	if depth == 0 {
		return "per_prefix"
	}
	return "prefix_depths[" + strconv.Itoa(depth-1) + "]"
}
