package simulate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
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
	// FallbackSends is how many tries got their code by the fallback
	// channel a held SMS send was offered (not in Sent, nor in Cost:
	// a pumping ring earns nothing by them). Tried = Sent +
	// FallbackSends + Refused + challenges neither solved nor taken
	// by the fallback. Left out when none.
	FallbackSends int `json:"fallback_sends,omitempty"`
	// Verified is how many codes sent (SMS or fallback) were verified.
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
	// Lookups is how many times the service asked the network for a
	// number's risk score on its tries, and LookupCost what they cost in
	// USD (the scenario's lookup_price each). Left out when none.
	Lookups    int     `json:"lookups,omitempty"`
	LookupCost float64 `json:"lookup_cost,omitempty"`
	// Carriers splits the tries by the carrier of their number
	// (guard.CarrierOf's name), when the scenario names carriers.
	Carriers map[string]*CarrierCounts `json:"carriers,omitempty"`
}

// CarrierCounts are one carrier's share of a population's Counts.
type CarrierCounts struct {
	Tried      int `json:"tried"`
	Sent       int `json:"sent"`
	Challenged int `json:"challenged"`
	Refused    int `json:"refused"`
}

func newCounts() *Counts { return &Counts{RefusedByCode: map[string]int{}} }

// ofCarrier is the counts of carrier; for "" (carriers not counted), a
// throwaway.
func (c *Counts) ofCarrier(carrier string) *CarrierCounts {
	if carrier == "" {
		return &CarrierCounts{}
	}
	if c.Carriers == nil {
		c.Carriers = map[string]*CarrierCounts{}
	}
	cc := c.Carriers[carrier]
	if cc == nil {
		cc = &CarrierCounts{}
		c.Carriers[carrier] = cc
	}
	return cc
}

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
	// Summary is the headline figures, when a population is the
	// attacker's (role: attacker).
	Summary *Summary `json:"summary,omitempty"`
	// Services are the campaign's counts per Verify service, when a
	// population names one (tenants.go): each service's populations
	// summed, the default service's as "default".
	Services map[string]*Counts `json:"services,omitempty"`
	// serviceOf is each population's row of Services.
	serviceOf map[string]string
	// order is the scenario's order of populations, for the table;
	// roles, each one's role (RoleUser or RoleAttacker).
	order []string
	roles map[string]string
	// byCarrier: the scenario names carriers, so tries are counted by
	// carrier too.
	byCarrier bool
}

// Summary sums the campaign's figures by role: what real users lost, and
// what the attackers got and cost.
type Summary struct {
	// UsersTried and UsersWithoutCode are the users' (role user) tries,
	// and how many of them got no code (tried - sent - fallback sends).
	UsersTried       int `json:"users_tried"`
	UsersWithoutCode int `json:"users_without_code"`
	// UsersFallbackSends and AttackersFallbackSends are the codes sent
	// by the fallback channel; the attackers' are not in AttackersSent.
	// Left out when none.
	UsersFallbackSends     int `json:"users_fallback_sends,omitempty"`
	AttackersFallbackSends int `json:"attackers_fallback_sends,omitempty"`
	// AttackersTried, AttackersSent and AttackersCost are the attackers'
	// (role attacker) tries, SMS sent and their cost in USD.
	AttackersTried int     `json:"attackers_tried"`
	AttackersSent  int     `json:"attackers_sent"`
	AttackersCost  float64 `json:"attackers_cost"`
	// Lookups and LookupCost are every population's risk lookups and
	// their cost in USD.
	Lookups    int     `json:"lookups"`
	LookupCost float64 `json:"lookup_cost"`
}

func newReport(s *Scenario) *Report {
	r := &Report{Populations: map[string]*Counts{}, roles: map[string]string{}}
	for _, p := range s.Populations {
		r.byCarrier = r.byCarrier || len(p.Carriers) > 0
		r.order = append(r.order, p.Name)
		r.roles[p.Name] = cmp.Or(p.Role, RoleUser)
		r.Populations[p.Name] = newCounts()
	}
	if len(scenarioServices(s)) > 0 {
		r.Services, r.serviceOf = map[string]*Counts{}, map[string]string{}
		for _, p := range s.Populations {
			row := cmp.Or(p.Service, defaultServiceRow)
			r.serviceOf[p.Name] = row
			if r.Services[row] == nil {
				r.Services[row] = newCounts()
			}
		}
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
	out := []*Counts{r.Populations[name], r.Hours[h].Populations[name]}
	if row, ok := r.serviceOf[name]; ok {
		out = append(out, r.Services[row])
	}
	return out
}

// roundCosts prices the lookups at lookupPrice each and rounds every
// cost to the cent, once the run is over.
func (r *Report) roundCosts(lookupPrice float64) {
	round := func(m map[string]*Counts) {
		for _, c := range m {
			c.Cost = cents(c.Cost)
			c.LookupCost = cents(float64(c.Lookups) * lookupPrice)
		}
	}
	round(r.Populations)
	round(r.Services)
	for _, h := range r.Hours {
		round(h.Populations)
	}
}

func cents(usd float64) float64 { return math.Round(usd*100) / 100 }

// summarise sums the campaign by role, when s has an attacker's
// population; a report without one has no summary.
func (r *Report) summarise(s *Scenario) {
	if !slices.ContainsFunc(s.Populations, func(p Population) bool { return p.attacker() }) {
		return
	}
	sum := &Summary{}
	for _, p := range s.Populations {
		c := r.Populations[p.Name]
		sum.Lookups += c.Lookups
		sum.LookupCost += c.LookupCost
		if p.attacker() {
			sum.AttackersTried += c.Tried
			sum.AttackersSent += c.Sent
			sum.AttackersCost += c.Cost
			sum.AttackersFallbackSends += c.FallbackSends
			continue
		}
		sum.UsersTried += c.Tried
		sum.UsersWithoutCode += c.Tried - c.Sent - c.FallbackSends
		sum.UsersFallbackSends += c.FallbackSends
	}
	sum.AttackersCost, sum.LookupCost = cents(sum.AttackersCost), cents(sum.LookupCost)
	r.Summary = sum
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// percent is n of total as "3.5 %"; "-" of none.
func percent(n, total int) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(total))
}

// codes is "unusual_volume 30, cooldown 2", most first; "-" for none.
func codes(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	return strings.Join(codeList(m), ", ")
}

// codeList is ["unusual_volume 30", "cooldown 2"], most first.
func codeList(m map[string]int) []string {
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
	return parts
}
