// Package simulate is the scenario simulator (`otpguard simulate`): it
// runs the real service, several instances built by app.New on one
// embedded Redis, on a virtual clock, and drives scripted populations of
// real users and attackers through the instances' HTTP handlers, so that
// a week of history and a day of attack take seconds to minutes. It
// counts what each population tried, was sent, challenged, refused and
// verified, and what the SMS cost; with the signals a scenario may give
// (the carriers its numbers come from, the network's risk score of each,
// whose figures are the attacker's), also by carrier, the lookups of the
// score, and a summary by role (docs/simulate.md).
package simulate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/guard"
)

// Scenario is one simulation: a deployment, its history and a campaign.
type Scenario struct {
	// Start is when the campaign starts; the history runs before it.
	Start time.Time `yaml:"start"`
	// History is how long legitimate traffic (the populations without
	// From) runs before Start.
	History Duration `yaml:"history"`
	// Duration is how long the campaign runs from Start.
	Duration Duration `yaml:"duration"`
	// Instances is how many otpguard instances share the Redis.
	Instances int `yaml:"instances"`
	// Seed makes the run repeatable: one seed, one result.
	Seed uint64 `yaml:"seed"`
	// Policy is a policy file (OTPGUARD_CONFIG), relative to the scenario;
	// "" runs the defaults.
	Policy string `yaml:"policy"`
	// Prices are USD per SMS by country, over DefaultPrices.
	Prices map[string]float64 `yaml:"prices"`
	// LookupPrice is USD per risk lookup (the network's score of a
	// number); default 0.01.
	LookupPrice float64 `yaml:"lookup_price"`
	// Populations are who sends.
	Populations []Population `yaml:"populations"`
}

// Population is one kind of sender in one country: real users or an
// attacker.
type Population struct {
	Name    string `yaml:"name"`
	Country string `yaml:"country"`
	// PeakPerHour is the busiest hour's tries on the daily curve
	// (DayCurve); PerMinute is a flat rate instead. One of the two.
	PeakPerHour float64 `yaml:"peak_per_hour"`
	PerMinute   float64 `yaml:"per_minute"`
	// From and Until bound the population in the campaign, as offsets
	// from Start. Without From it is standing traffic: it runs through
	// the history too.
	From  *Duration `yaml:"from"`
	Until *Duration `yaml:"until"`
	// Returning is the share of tries that go to numbers this population
	// verified earlier (or imported ones).
	Returning float64 `yaml:"returning"`
	// ReturningTo names another population of the same country whose
	// users this population's returning tries go to: a surge of a
	// country's real users brings back its existing users as well as new
	// ones. The two then share one pool of users: the numbers either
	// verifies join it, and a user returns at most once a day through
	// either.
	ReturningTo string `yaml:"returning_to"`
	// Imported users are imported as trusted numbers before Start.
	Imported bool `yaml:"imported"`
	// Verify is the share of codes sent that are verified, a minute later.
	Verify float64 `yaml:"verify"`
	// Solve is the share of challenges (428) solved and resent.
	Solve float64 `yaml:"solve"`
	// Fallback is the share of its users who take the channel a held SMS
	// send is offered (the policy's otp.fallback_channel): they send again
	// by it at once, rather than solve the challenge.
	Fallback float64 `yaml:"fallback"`
	// Account is the share of tries sent with "account": true.
	Account float64 `yaml:"account"`
	// RotateIP: a new client address per try; otherwise each user keeps one.
	RotateIP bool `yaml:"rotate_ip"`
	// Prefixes are the E.164 ranges numbers are drawn from; by default
	// uniformly random valid mobile numbers of Country.
	Prefixes []string `yaml:"prefixes"`
	// Carriers, when set, are the only carriers of Country whose ranges
	// new numbers are drawn from (libphonenumber's English names, matched
	// by guard.CarrierKey: "mtn" names MTN).
	Carriers []string `yaml:"carriers"`
	// Risk is the share of its numbers the network scores high and low;
	// nil: DefaultRisk.
	Risk *RiskShares `yaml:"risk"`
	// Role is RoleUser (the default) or RoleAttacker: whose figures the
	// report's summary counts this population's as.
	Role string `yaml:"role"`
	// Service is the Verify service SID ("VA" and 32 hex digits) whose
	// app this population's users use: its tries go through the service's
	// Verify routes (tenants.go); "" the default service's /otp API.
	Service string `yaml:"service"`
}

// RiskShares are the shares of a population's numbers the network scores
// high (RiskHigh) and low (RiskLow); the rest score RiskMid. In a risk
// block given, a share left out is 0.
type RiskShares struct {
	High *float64 `yaml:"high"`
	Low  *float64 `yaml:"low"`
}

// The scores the fake network gives, and the shares of a population
// without a risk block: most real numbers score low, a few high.
const (
	RiskHigh           = 90
	RiskMid            = 50
	RiskLow            = 10
	defaultRiskHigh    = 0.01
	defaultRiskLow     = 0.9
	defaultLookupPrice = 0.01
)

// The roles of a population.
const (
	RoleUser     = "user"
	RoleAttacker = "attacker"
)

// Duration is a Go duration in the scenario ("168h", "90m").
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("%q is not a duration (write e.g. 90m, 24h, 168h)", n.Value)
	}
	*d = Duration(v)
	return nil
}

// Limits on what a scenario may ask, so that a typo cannot start a
// simulation of years.
const (
	maxHistory     = 60 * 24 * time.Hour
	maxDuration    = 30 * 24 * time.Hour
	maxInstances   = 16
	maxPerMinute   = 2000
	internationalC = "001" // the international networks (+870, +881, ...)
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 _.+-]{0,39}$`)

// Load reads and validates the scenario at path; a relative Policy is
// made relative to the scenario's directory.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Policy != "" && !filepath.IsAbs(s.Policy) {
		s.Policy = filepath.Join(filepath.Dir(path), s.Policy)
	}
	if s.Policy != "" {
		if _, err := os.Stat(s.Policy); err != nil {
			return nil, fmt.Errorf("%s: policy: %w", path, err)
		}
	}
	return s, nil
}

// Parse decodes and validates a scenario. Unknown fields are refused with
// their path: a misspelt field must not silently run as its default.
func Parse(b []byte) (*Scenario, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	s := &Scenario{Instances: 2, Seed: 1, LookupPrice: defaultLookupPrice}
	if err := checkFields(&root, s); err != nil {
		return nil, err
	}
	if err := root.Decode(s); err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// validate names every bad value, with its path.
func (s *Scenario) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Start.IsZero() {
		bad("start: required (a time such as 2026-03-02T00:00:00Z)")
	}
	if h := time.Duration(s.History); h < 0 || h > maxHistory {
		bad("history: %s is outside 0 to %s", h, maxHistory)
	}
	if d := time.Duration(s.Duration); d <= 0 || d > maxDuration {
		bad("duration: required, more than 0 and at most %s (got %s)", maxDuration, d)
	}
	if s.Instances < 1 || s.Instances > maxInstances {
		bad("instances: %d is outside 1 to %d", s.Instances, maxInstances)
	}
	for c, p := range s.Prices {
		if !knownCountry(c) {
			bad("prices.%s: not a country (ISO 3166-1 alpha-2, or 001 for the international networks)", c)
		}
		if p < 0 || p > 10 {
			bad("prices.%s: %v USD per SMS is outside 0 to 10", c, p)
		}
	}
	if s.LookupPrice < 0 || s.LookupPrice > 10 {
		bad("lookup_price: %v USD per lookup is outside 0 to 10", s.LookupPrice)
	}
	if len(s.Populations) == 0 {
		bad("populations: at least one is required")
	}
	names := map[string]bool{}
	for i, p := range s.Populations {
		at := fmt.Sprintf("populations[%d]", i)
		if names[p.Name] {
			bad("%s.name: %q is used twice", at, p.Name)
		}
		names[p.Name] = true
		errs = append(errs, p.validate(at, time.Duration(s.Duration))...)
	}
	for i := range s.Populations {
		errs = append(errs, s.validateReturning(i)...)
	}
	return errors.Join(errs...)
}

// validateReturning checks population i's returning tries: returning_to
// names another population of its country that owns its users, and a
// population that asks for returning tries can have a user to return to
// in the run at all. Without that check the tries would silently go to
// new numbers, and the run would measure another campaign than the one
// the scenario describes.
func (s *Scenario) validateReturning(i int) []error {
	p := &s.Populations[i]
	at := fmt.Sprintf("populations[%d]", i)
	if p.ReturningTo != "" {
		j := s.population(p.ReturningTo)
		switch {
		case j < 0:
			return []error{fmt.Errorf("%s.returning_to: %q is not the name of a population", at, p.ReturningTo)}
		case j == i:
			return []error{fmt.Errorf("%s.returning_to: %q is this population; name another one, or leave returning_to out", at, p.ReturningTo)}
		case s.Populations[j].ReturningTo != "":
			return []error{fmt.Errorf("%s.returning_to: %q returns to %q itself; name the population that owns the users, %q",
				at, p.ReturningTo, s.Populations[j].ReturningTo, s.Populations[j].ReturningTo)}
		case s.Populations[j].Country != p.Country:
			return []error{fmt.Errorf("%s.returning_to: %q is of country %s, this population of %s; users return in their own country",
				at, p.ReturningTo, s.Populations[j].Country, p.Country)}
		case s.Populations[j].Service != p.Service:
			return []error{fmt.Errorf("%s.returning_to: %q uses service %q, this population %q; a number is trusted by the service it verified with",
				at, p.ReturningTo, s.Populations[j].Service, p.Service)}
		case p.Returning == 0:
			return []error{fmt.Errorf("%s.returning_to: set, but returning is 0: no try returns (give returning a share)", at)}
		case p.Imported:
			return []error{fmt.Errorf("%s.imported: the users are %q's, imported or not by its own imported; leave imported out here", at, p.ReturningTo)}
		}
	}
	if p.Returning > 0 && !s.returnable(i) {
		return []error{fmt.Errorf("%s.returning: %v, but no user can return in this run: a number returns at most once a day, "+
			"and no number this population returns to is imported, or tried more than %s before the population's end; "+
			"give it users (imported: true, a history: no from, or returning_to: a population of %s with a history), or set returning: 0",
			at, p.Returning, returningEvery, p.Country)}
	}
	return nil
}

// population is the index of the population named name; -1 if none.
func (s *Scenario) population(name string) int {
	for i := range s.Populations {
		if s.Populations[i].Name == name {
			return i
		}
	}
	return -1
}

// owner is the population whose users population i's returning tries go
// to: the one it returns to, or itself.
func (s *Scenario) owner(i int) int {
	if j := s.population(s.Populations[i].ReturningTo); s.Populations[i].ReturningTo != "" && j >= 0 {
		return j
	}
	return i
}

// returnable reports whether a returning try of population i can find a
// user at all: the owner of its users is imported (imported users may
// return at once), or a population sharing them verifies codes and tries
// a number more than a day (returningEvery) before population i's end,
// so that the number, verified, may come back before it. It is a
// necessary condition only: a pool that is merely small early on still
// sends returning tries to new numbers, which the run reports on stderr.
func (s *Scenario) returnable(i int) bool {
	o := s.owner(i)
	if s.Populations[o].Imported {
		return true
	}
	campaign := time.Duration(s.Duration)
	_, end := s.Populations[i].bounds(campaign)
	for j := range s.Populations {
		q := &s.Populations[j]
		if s.owner(j) != o || q.Verify == 0 {
			continue
		}
		first, _ := q.bounds(campaign)
		if q.standing() {
			first = -time.Duration(s.History)
		}
		if end-first > returningEvery {
			return true
		}
	}
	return false
}

func (p *Population) validate(at string, campaign time.Duration) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(at+"."+format, args...))
	}
	if !nameRE.MatchString(p.Name) {
		bad("name: %q: required, at most 40 letters, digits, spaces or _.+-", p.Name)
	}
	if !knownCountry(p.Country) {
		bad("country: %q is not a country (ISO 3166-1 alpha-2, or 001 for the international networks)", p.Country)
	}
	if p.Country == internationalC && len(p.Prefixes) == 0 {
		bad("prefixes: required for country 001 (e.g. +8816, +870)")
	}
	switch {
	case (p.PeakPerHour > 0) == (p.PerMinute > 0):
		bad("peak_per_hour, per_minute: give exactly one, above 0")
	case p.PeakPerHour < 0 || p.PerMinute < 0 || p.PerMinute > maxPerMinute || p.PeakPerHour > 60*maxPerMinute:
		bad("per_minute: at most %d a minute (peak_per_hour %d)", maxPerMinute, 60*maxPerMinute)
	}
	from, until := p.bounds(campaign)
	if p.From != nil && (from < 0 || from >= campaign) {
		bad("from: %s is outside the campaign (0 to %s)", from, campaign)
	}
	if p.Until != nil && (until <= from || until > campaign) {
		bad("until: %s must be after from (%s) and at most the duration (%s)", until, from, campaign)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"returning", p.Returning}, {"verify", p.Verify}, {"solve", p.Solve}, {"account", p.Account}, {"fallback", p.Fallback}} {
		if f.v < 0 || f.v > 1 {
			bad("%s: %v is not a share between 0 and 1", f.name, f.v)
		}
	}
	for i, pre := range p.Prefixes {
		if err := checkPrefix(pre); err != nil {
			bad("prefixes[%d]: %v", i, err)
		}
	}
	if err := p.validateCarriers(); err != nil {
		bad("carriers: %v", err)
	}
	if err := p.validateRisk(); err != nil {
		bad("risk: %v", err)
	}
	if p.Role != "" && p.Role != RoleUser && p.Role != RoleAttacker {
		bad("role: %q is not %s or %s", p.Role, RoleUser, RoleAttacker)
	}
	if p.Service != "" {
		switch {
		case !guard.ValidSID(p.Service, "VA"):
			bad("service: %q is not a Verify service SID (VA and 32 hex digits)", p.Service)
		case p.Account > 0:
			bad("account: the Verify routes have no account flag; a service's population cannot set it")
		case p.Imported:
			bad("imported: imports are the default service's trust; a service's users cannot be imported")
		}
	}
	return errs
}

// attacker reports whether p's figures are the attacker's.
func (p *Population) attacker() bool { return p.Role == RoleAttacker }

// bounds is the population's time in the campaign, as offsets from Start.
func (p *Population) bounds(campaign time.Duration) (from, until time.Duration) {
	until = campaign
	if p.From != nil {
		from = time.Duration(*p.From)
	}
	if p.Until != nil {
		until = time.Duration(*p.Until)
	}
	return from, until
}

// standing reports whether the population runs in the history too.
func (p *Population) standing() bool { return p.From == nil }

func knownCountry(c string) bool {
	return c == internationalC || len(c) == 2 && phonenumbers.GetCountryCodeForRegion(c) != 0
}
