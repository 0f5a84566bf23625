package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Counts is what one population met, over an hour or the campaign.
type Counts struct {
	// Tried is how many sends it asked for (a challenge's resend is the
	// same try).
	Tried int `json:"tried"`
	// Sent is how many codes it was sent.
	Sent int `json:"sent"`
	// Challenged is how many tries were answered 428 challenge_required.
	Challenged int `json:"challenged"`
	// Refused is how many tries ended refused: outright, or on the resend
	// of a solved challenge. Tried = Sent + Refused + challenges not solved.
	Refused int `json:"refused"`
	// Verified is how many codes sent were verified.
	Verified int `json:"verified"`
	// Cost is what the SMS sent cost, in USD.
	Cost float64 `json:"cost"`
	// RefusedByCode splits Refused by the problem code of the refusal.
	RefusedByCode map[string]int `json:"refused_by_code"`
	// Returning is how many tries went to numbers the population verified
	// earlier or imported: trusted numbers, which no automatic rule may
	// challenge or refuse. ReturningChallenged and ReturningRefused are how
	// many of them were challenged, or refused (by any rule).
	Returning           int `json:"returning"`
	ReturningChallenged int `json:"returning_challenged"`
	ReturningRefused    int `json:"returning_refused"`
}

func newCounts() *Counts { return &Counts{RefusedByCode: map[string]int{}} }

// Hour is one hour of the campaign.
type Hour struct {
	Hour        int                `json:"hour"`  // hours since start
	Start       time.Time          `json:"start"` // when it began
	Populations map[string]*Counts `json:"populations"`
}

// Report is what a run counted, history excluded.
type Report struct {
	Populations map[string]*Counts `json:"populations"`
	Hours       []Hour             `json:"hours"`
	// order is the scenario's order of populations, for the table.
	order []string
}

func newReport(s *Scenario) *Report {
	r := &Report{Populations: map[string]*Counts{}}
	for _, p := range s.Populations {
		r.order = append(r.order, p.Name)
		r.Populations[p.Name] = newCounts()
	}
	hours := int(math.Ceil(time.Duration(s.Duration).Hours()))
	for h := range hours {
		hr := Hour{Hour: h, Start: s.Start.Add(time.Duration(h) * time.Hour), Populations: map[string]*Counts{}}
		for _, name := range r.order {
			hr.Populations[name] = newCounts()
		}
		r.Hours = append(r.Hours, hr)
	}
	return r
}

// counts are the campaign's and the hour's Counts of a population at t;
// nil before the campaign (the history is not reported).
func (r *Report) counts(s *Scenario, name string, t time.Time) []*Counts {
	if t.Before(s.Start) {
		return nil
	}
	h := int(t.Sub(s.Start) / time.Hour)
	if h >= len(r.Hours) {
		return nil
	}
	return []*Counts{r.Populations[name], r.Hours[h].Populations[name]}
}

// roundCosts rounds every cost to the cent, once the run is over.
func (r *Report) roundCosts() {
	round := func(m map[string]*Counts) {
		for _, c := range m {
			c.Cost = math.Round(c.Cost*100) / 100
		}
	}
	round(r.Populations)
	for _, h := range r.Hours {
		round(h.Populations)
	}
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes a table per hour and per population, then the
// campaign's totals.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hour\tstart\tpopulation\ttried\tsent\tchallenged\trefused\tverified\tcost USD\treturning (challenged, refused)\trefused by code\t")
	for _, h := range r.Hours {
		for _, name := range r.order {
			if c := h.Populations[name]; c.Tried > 0 {
				row(tw, fmt.Sprint(h.Hour), h.Start.Format("01-02 15:04"), name, c)
			}
		}
	}
	for _, name := range r.order {
		row(tw, "total", "", name, r.Populations[name])
	}
	return tw.Flush()
}

func row(w io.Writer, hour, start, name string, c *Counts) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.2f\t%d (%d, %d)\t%s\t\n", hour, start, name,
		c.Tried, c.Sent, c.Challenged, c.Refused, c.Verified, c.Cost,
		c.Returning, c.ReturningChallenged, c.ReturningRefused, codes(c.RefusedByCode))
}

// codes is "unusual_volume 30, cooldown 2", most first.
func codes(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
