package opsweb

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// The attack view: GET /ops/abuse, and the section at the top of /ops.

// abuseBlocksPage is how many per-number blocks the view lists.
const abuseBlocksPage = 20

type abuseJSON struct {
	At         time.Time        `json:"at"`
	State      State            `json:"state"`
	Budget     abuseBudgetJSON  `json:"budget"`
	LastHour   *abuseWindowJSON `json:"last_hour"`
	LastDay    *abuseWindowJSON `json:"last_day"`
	Alerts     []abuseAlertJSON `json:"alerts"`
	AutoBlocks []abuseAutoJSON  `json:"auto_blocks"`
	Blocks     abuseBlocksJSON  `json:"blocks"`
	Errors     []string         `json:"errors,omitempty"`
	// SolvedCapSpent are the countries whose solved-challenge cap refused
	// a send in the clock hour under way (ops.AbuseReport.SolvedCapSpent).
	SolvedCapSpent []string `json:"solved_cap_spent"`
}

// State is this instance's health as the attack view shows it, from the
// server that serves the desk (Options.State).
type State struct {
	Status     string   `json:"status"` // ok, degraded
	Redis      string   `json:"redis"`
	Breaker    string   `json:"breaker"`
	Instances  int      `json:"instances"`
	InFallback []string `json:"in_fallback"`
	// Shed counts the requests this instance shed with 503 overloaded,
	// StoreShed and StoreLate its store calls given up on / answered late
	// while Redis was healthy, since start.
	Shed      int64  `json:"shed"`
	StoreShed int64  `json:"store_shed"`
	StoreLate int64  `json:"store_late"`
	Database  string `json:"database,omitempty"`
	// NodesDown are the Redis Cluster masters whose breaker is not closed,
	// Masters how many masters this instance knows (0: not a cluster), and
	// ShedAt when this instance last shed a request (zero: never); the
	// desk's status reads them (status.go).
	NodesDown []string  `json:"-"`
	Masters   int       `json:"-"`
	ShedAt    time.Time `json:"-"`
}

type abuseBudgetJSON struct {
	Hour abuseBudgetWindowJSON `json:"hour"`
	Day  abuseBudgetWindowJSON `json:"day"`
}

type abuseBudgetWindowJSON struct {
	Enabled bool  `json:"enabled"`
	Used    int64 `json:"used"`
	Limit   int64 `json:"limit"`
	// Override: an emergency override of the ops desk sets Limit (and
	// Enabled, when the policy file has no budget for the window).
	Override  bool  `json:"override"`
	Remaining int64 `json:"remaining"`
	Exhausted bool  `json:"exhausted"`
	// ResetsIn is when the window ends (it starts at its first send).
	ResetsIn int64 `json:"resets_in_seconds"`
}

type abuseTallyJSON struct {
	Sends          int64            `json:"sends"`
	Refusals       int64            `json:"refusals"`
	Verifications  int64            `json:"verifications"`
	ConversionRate *float64         `json:"conversion_rate"`
	RefusalsByCode map[string]int64 `json:"refusals_by_code,omitempty"`
	// TrustedSends are the sends to trusted numbers, among Sends;
	// Challenged the sends answered with a challenge, among Refusals.
	TrustedSends int64 `json:"trusted_sends"`
	Challenged   int64 `json:"challenged"`
	// RiskLookups are the risk score lookups asked (otp.risk).
	RiskLookups int64 `json:"risk_lookups"`
	// SolvedSends are the sends after a solved challenge, among Sends;
	// SolvedCapRefusals the sends the solved cap refused, among Refusals
	// (their code, unusual_volume, is the velocity rule's too).
	SolvedSends       int64 `json:"solved_sends"`
	SolvedCapRefusals int64 `json:"solved_cap_refusals"`
}

type abuseLimitJSON struct {
	Rule          string `json:"rule"`
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	Count         *int64 `json:"count,omitempty"`
	Quarantined   bool   `json:"quarantined,omitempty"`
	// Override: an emergency override of the ops desk sets Limit.
	Override bool `json:"override,omitempty"`
}

type abuseCountryJSON struct {
	Country     string `json:"country"`
	CallingCode string `json:"calling_code,omitempty"`
	abuseTallyJSON
	Limits []abuseLimitJSON `json:"limits"`
	// Carriers are the country's carriers, busiest first (ops.CarrierRow).
	Carriers []abuseCarrierJSON `json:"carriers"`
	// Paused: a country_pause holds it, PausedSecondsLeft more seconds.
	Paused            bool   `json:"paused"`
	PausedSecondsLeft *int64 `json:"paused_seconds_left,omitempty"`
	// SolvedCapSpent: the solved cap refused a send to it this clock hour.
	SolvedCapSpent bool `json:"solved_cap_spent"`
	// SolvedCap is the solved cap in force this clock hour (nil:
	// challenges off, or the "~other" row).
	SolvedCap *abuseSolvedCapJSON `json:"solved_cap,omitempty"`
}

// abuseCarrierJSON is one carrier of a country: its key ("mtn", "~other"
// for the rest), libphonenumber's name and the desk's ("NG / MTN"), its
// counts and the ops desk's overrides in force on it.
type abuseCarrierJSON struct {
	Carrier     string `json:"carrier"`
	Name        string `json:"name"`
	SubjectName string `json:"subject_name"`
	abuseTallyJSON
	Limits []abuseLimitJSON `json:"limits"`
	// Paused: a carrier_pause holds it, PausedSecondsLeft more seconds.
	Paused            bool   `json:"paused"`
	PausedSecondsLeft *int64 `json:"paused_seconds_left,omitempty"`
	// SolvedCapSpent: the solved cap (or the carrier's share of it)
	// refused a send to it this clock hour.
	SolvedCapSpent bool `json:"solved_cap_spent"`
	// SolvedCap is the carrier's share of the solved cap in force this
	// clock hour (nil: the carriers do not split the country's room, or
	// the "~other" row).
	SolvedCap *abuseSolvedCapJSON `json:"solved_cap,omitempty"`
}

// abuseSolvedCapJSON is the solved-challenge cap in force on a row this
// clock hour (ops.SolvedCap): its limit, the sends it holds, whether the
// next send after a solved challenge is refused, and whether the solved
// tier's conversion watch cut it to a tenth.
type abuseSolvedCapJSON struct {
	Limit int64 `json:"limit"`
	Used  int64 `json:"used"`
	Full  bool  `json:"full"`
	Cut   bool  `json:"cut"`
}

// toSolvedCapJSON is c as the view shows it; nil for nil.
func toSolvedCapJSON(c *ops.SolvedCap) *abuseSolvedCapJSON {
	if c == nil {
		return nil
	}
	return &abuseSolvedCapJSON{Limit: c.Limit, Used: c.Used, Full: c.Full, Cut: c.Cut}
}

type abusePrefixJSON struct {
	Prefix  string `json:"prefix"`
	Country string `json:"country,omitempty"`
	abuseTallyJSON
	Limit *abuseLimitJSON `json:"limit,omitempty"`
}

type abuseWindowJSON struct {
	Since          time.Time          `json:"since"`
	Total          abuseTallyJSON     `json:"total"`
	Countries      []abuseCountryJSON `json:"countries"`
	CountriesTotal int                `json:"countries_total"`
	Prefixes       []abusePrefixJSON  `json:"prefixes"`
	PrefixesTotal  int                `json:"prefixes_total"`
	// Services are each service's rows (ops.ServiceRow); absent when the
	// policy file names no service.
	Services []abuseServiceJSON `json:"services,omitempty"`
}

// abuseServiceJSON is one service in a window: "default" for the default
// service (as the metrics' service label names it), else its SID.
type abuseServiceJSON struct {
	Service      string `json:"service"`
	Default      bool   `json:"default"`
	FriendlyName string `json:"friendly_name,omitempty"`
	abuseTallyJSON
	Countries      []abuseServiceCountryJSON `json:"countries"`
	CountriesTotal int                       `json:"countries_total"`
}

type abuseServiceCountryJSON struct {
	Country string `json:"country"`
	abuseTallyJSON
}

type abuseAlertJSON struct {
	Rule        string    `json:"rule"`
	Scope       string    `json:"scope"`
	Subject     string    `json:"subject"`
	Country     string    `json:"country,omitempty"`
	Outcome     string    `json:"outcome"`
	At          time.Time `json:"at"`
	Until       time.Time `json:"until"`
	SecondsLeft int64     `json:"seconds_left"`
	Detail      string    `json:"detail"`
	// Service is the SID of the service whose sends the rule judged;
	// absent for the default service's.
	Service string `json:"service,omitempty"`
}

type abuseAutoJSON struct {
	denyEntry
	SecondsLeft *int64 `json:"seconds_left,omitempty"`
}

type abuseBlocksJSON struct {
	Total int           `json:"total"`
	First []blockedItem `json:"first"`
}

// attackView reads the attack view, for GET /ops/abuse and the top of
// the page.
type attackView struct {
	abuse *ops.AbuseDesk // nil: no attack view
	ops   *ops.Desk      // nil: no blocked numbers in it
	state func() State
}

// Abuse: GET /ops/abuse. The attack view: the spend budget, sends,
// refusals and verifications by country and prefix over the last hour and
// day, the live alerts and automatic blocks, the blocked numbers and this
// instance's outage and shedding state. ?top= sets the rows per list
// (default 10, at most 50).
func (s *API) Abuse(c echo.Context) error {
	if s.view.abuse == nil {
		return problem.Errorf(problem.CodeNotFound, "this server has no attack view")
	}
	top, err := intParam(c.QueryParams(), "top")
	if err != nil {
		return err
	}
	if top > ops.MaxAbuseTop {
		return problem.Errorf(problem.CodeInvalidRequest, "top must be at most %d", ops.MaxAbuseTop)
	}
	v, err := s.view.read(c.Request().Context(), int(top))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// read builds the view. The store's counters failing is an error
// (503); the blocked numbers failing is noted in Errors.
func (a *attackView) read(ctx context.Context, top int) (*abuseJSON, error) {
	rep, err := a.abuse.Read(ctx, top)
	if err != nil {
		return nil, err
	}
	now := rep.At
	v := &abuseJSON{At: now.UTC(), Alerts: []abuseAlertJSON{}, AutoBlocks: []abuseAutoJSON{},
		SolvedCapSpent: append([]string{}, rep.SolvedCapSpent...)}
	v.State = a.instanceState()
	for _, b := range rep.Budget {
		w := abuseBudgetWindowJSON{Enabled: b.Limit > 0, Used: b.Used, Limit: b.Limit, Override: b.Override, Exhausted: b.Exhausted,
			Remaining: max(0, b.Limit-b.Used), ResetsIn: seconds(b.ResetsIn)}
		if b.Window == "hour" {
			v.Budget.Hour = w
		} else {
			v.Budget.Day = w
		}
	}
	for _, w := range rep.Windows {
		j := toWindowJSON(w, now)
		if w.Name == "hour" {
			v.LastHour = &j
		} else {
			v.LastDay = &j
		}
	}
	for _, a := range rep.Alerts {
		v.Alerts = append(v.Alerts, abuseAlertJSON{Rule: a.Rule, Service: a.Service, Scope: a.Scope, Subject: a.Subject, Country: a.Country,
			Outcome: a.Outcome, At: a.At.UTC(), Until: a.Until.UTC(), SecondsLeft: seconds(a.Until.Sub(now)), Detail: a.Detail})
	}
	for _, e := range rep.AutoBlocks {
		a := abuseAutoJSON{denyEntry: toDenyEntry(e)}
		if e.ExpiresAt != nil {
			left := seconds(e.ExpiresAt.Sub(now))
			a.SecondsLeft = &left
		}
		v.AutoBlocks = append(v.AutoBlocks, a)
	}
	v.Blocks.First = []blockedItem{}
	if a.ops != nil {
		page, err := a.ops.Blocked(ctx, ops.BlockFilter{Limit: abuseBlocksPage})
		if err != nil {
			v.Errors = append(v.Errors, "blocked numbers: "+problemMessage(problem.CodeOf(err)))
		}
		v.Blocks.Total = page.Total
		for _, b := range page.Blocks {
			v.Blocks.First = append(v.Blocks.First, toBlockedItem(b, now))
		}
	}
	return v, nil
}

// instanceState is Options.State's answer; "ok" when there is none.
func (a *attackView) instanceState() State {
	if a.state == nil {
		return State{Status: "ok", InFallback: []string{}}
	}
	return a.state()
}

func seconds(d time.Duration) int64 { return int64(max(0, d.Round(time.Second)/time.Second)) }

func toTallyJSON(t ops.AbuseTally) abuseTallyJSON {
	j := abuseTallyJSON{Sends: t.Sends, Refusals: t.Refusals, Verifications: t.Verifications, RefusalsByCode: t.ByCode,
		TrustedSends: t.Trusted, Challenged: t.Challenged(), RiskLookups: t.RiskLookups,
		SolvedSends: t.Solved, SolvedCapRefusals: t.SolvedCapped}
	if r, ok := t.ConversionRate(); ok {
		r = math.Round(r*1000) / 1000
		j.ConversionRate = &r
	}
	return j
}

func toLimitJSON(l ops.AbuseLimit) abuseLimitJSON {
	j := abuseLimitJSON{Rule: l.Rule, Limit: l.Limit, WindowSeconds: int64(l.Window / time.Second), Quarantined: l.Quarantined,
		Override: l.Override}
	if l.Rule == "country_velocity" {
		n := l.Count
		j.Count = &n
	}
	return j
}

func toWindowJSON(w ops.AbuseWindow, now time.Time) abuseWindowJSON {
	j := abuseWindowJSON{Since: w.Since.UTC(), Total: toTallyJSON(w.Total), Countries: []abuseCountryJSON{}, Prefixes: []abusePrefixJSON{},
		CountriesTotal: w.CountriesTotal, PrefixesTotal: w.PrefixesTotal}
	for _, c := range w.Countries {
		cj := abuseCountryJSON{Country: c.Country, abuseTallyJSON: toTallyJSON(c.AbuseTally), Limits: []abuseLimitJSON{},
			SolvedCapSpent: c.SolvedCapSpent, SolvedCap: toSolvedCapJSON(c.SolvedCap)}
		if c.Country != ops.OtherField {
			cj.CallingCode = guard.CountryPrefix(c.Country)
		}
		for _, l := range c.Limits {
			cj.Limits = append(cj.Limits, toLimitJSON(l))
		}
		cj.Carriers = toCarriersJSON(c, now)
		if !c.PausedUntil.IsZero() {
			left := seconds(c.PausedUntil.Sub(now))
			cj.Paused, cj.PausedSecondsLeft = true, &left
		}
		j.Countries = append(j.Countries, cj)
	}
	for _, p := range w.Prefixes {
		pj := abusePrefixJSON{Prefix: p.Prefix, Country: p.Country, abuseTallyJSON: toTallyJSON(p.AbuseTally)}
		if p.Limit.Rule != "" {
			l := toLimitJSON(p.Limit)
			pj.Limit = &l
		}
		j.Prefixes = append(j.Prefixes, pj)
	}
	for _, r := range w.Services {
		sj := abuseServiceJSON{Service: guard.ServiceLabel(r.Service), FriendlyName: r.FriendlyName, abuseTallyJSON: toTallyJSON(r.AbuseTally),
			Default: r.Service == guard.DefaultService, Countries: []abuseServiceCountryJSON{}, CountriesTotal: r.CountriesTotal}
		for _, c := range r.Countries {
			sj.Countries = append(sj.Countries, abuseServiceCountryJSON{Country: c.Country, abuseTallyJSON: toTallyJSON(c.AbuseTally)})
		}
		j.Services = append(j.Services, sj)
	}
	return j
}

func toCarriersJSON(c ops.CountryRow, now time.Time) []abuseCarrierJSON {
	out := make([]abuseCarrierJSON, 0, len(c.Carriers))
	for _, k := range c.Carriers {
		kj := abuseCarrierJSON{Carrier: k.Key, Name: k.Name, SubjectName: k.SubjectName(c.Country), abuseTallyJSON: toTallyJSON(k.AbuseTally),
			Limits: []abuseLimitJSON{}, Paused: !k.PausedUntil.IsZero(), SolvedCapSpent: k.SolvedCapSpent,
			SolvedCap: toSolvedCapJSON(k.SolvedCap)}
		for _, l := range k.Limits {
			kj.Limits = append(kj.Limits, toLimitJSON(l))
		}
		if kj.Paused {
			left := seconds(k.PausedUntil.Sub(now))
			kj.PausedSecondsLeft = &left
		}
		out = append(out, kj)
	}
	return out
}
