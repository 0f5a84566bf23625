package simulate

import (
	"time"
)

// headline is one population's row of the summary the text and the HTML
// report open with. Its figures are the report's campaign Counts, the
// ones the JSON holds under populations, so the summary a person reads
// and the JSON a script reads cannot disagree.
type headline struct {
	Name string
	Role string // RoleUser or RoleAttacker
	// Tried, Sent and Cost (USD, the SMS) are the population's campaign
	// counts (Sent the SMS); WithoutCode is Tried - Sent - FallbackSends,
	// and Percent it as a share of Tried ("7.4 %", "-" of none).
	Tried, Sent, WithoutCode int
	Percent                  string
	Cost                     float64
}

// headlines are the summary's rows, in the scenario's order of populations.
func (r *Report) headlines() []headline {
	var out []headline
	for _, name := range r.order {
		c := r.Populations[name]
		out = append(out, headline{Name: name, Role: r.roles[name], Tried: c.Tried, Sent: c.Sent,
			WithoutCode: c.Tried - c.Sent - c.FallbackSends, Percent: percent(c.Tried-c.Sent-c.FallbackSends, c.Tried), Cost: c.Cost})
	}
	return out
}

// span is the campaign's first hour's start and its number of hours.
func (r *Report) span() (start time.Time, hours int) {
	if len(r.Hours) == 0 {
		return time.Time{}, 0
	}
	return r.Hours[0].Start, len(r.Hours)
}

// lookups reports whether any population's tries made risk lookups.
func (r *Report) lookups() bool {
	for _, c := range r.Populations {
		if c.Lookups > 0 {
			return true
		}
	}
	return false
}
