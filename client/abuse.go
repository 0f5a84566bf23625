package client

import (
	"context"
	"net/url"
	"time"
)

// AbuseView is the attack view (GET /ops/abuse): the SMS spend budget,
// sends, refusals and verifications by country and prefix for the last
// hour and day, the live alerts and automatic blocks, the blocked
// numbers, and one instance's outage state. The figures live in Redis, so
// every instance shows the same.
type AbuseView struct {
	At         time.Time    `json:"at"` // otpguard's clock when read
	State      AbuseState   `json:"state"`
	Budget     AbuseBudgets `json:"budget"`
	LastHour   AbuseWindow  `json:"last_hour"` // the clock hour under way and the one before
	LastDay    AbuseWindow  `json:"last_day"`  // the 24 clock hours up to now
	Alerts     []AbuseAlert `json:"alerts"`
	AutoBlocks []AutoBlock  `json:"auto_blocks"`
	Blocks     AbuseBlocks  `json:"blocks"`
	// Errors names the parts that could not be read; the rest is shown.
	Errors []string `json:"errors,omitempty"`
	// SolvedCapSpent are the countries whose solved-challenge cap refused
	// a send in the clock hour under way.
	SolvedCapSpent []string `json:"solved_cap_spent"`
}

// AbuseState is the answering instance's view of the outage and overload
// state.
type AbuseState struct {
	Status     string   `json:"status"`  // "ok" or "degraded"
	Redis      string   `json:"redis"`   // "up" or "down"
	Breaker    string   `json:"breaker"` // "closed", "half-open" or "open"
	Instances  int      `json:"instances"`
	InFallback []string `json:"in_fallback"`
	Shed       int64    `json:"shed"`       // requests shed with 503 overloaded since it started
	StoreShed  int64    `json:"store_shed"` // Redis calls given up on while Redis was healthy
	StoreLate  int64    `json:"store_late"` // Redis calls a healthy Redis answered late
	Database   string   `json:"database,omitempty"`
}

// AbuseBudgets are the SMS spend budget's windows.
type AbuseBudgets struct {
	Hour AbuseBudget `json:"hour"`
	Day  AbuseBudget `json:"day"`
}

// AbuseBudget is one window of the SMS spend budget.
type AbuseBudget struct {
	Enabled   bool  `json:"enabled"` // false when otp.budget sets no limit for it
	Used      int64 `json:"used"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	// Exhausted: every send is refused (503 budget_exhausted) until the
	// window resets.
	Exhausted       bool  `json:"exhausted"`
	ResetsInSeconds int64 `json:"resets_in_seconds"`
	// Override: an emergency override (Overrides) sets Limit, not the
	// policy file.
	Override bool `json:"override"`
}

// AbuseTally counts one subject's traffic in a window.
type AbuseTally struct {
	Sends         int64 `json:"sends"`
	Refusals      int64 `json:"refusals"`
	Verifications int64 `json:"verifications"`
	// ConversionRate is Verifications / Sends; nil when nothing was sent.
	ConversionRate *float64         `json:"conversion_rate"`
	RefusalsByCode map[string]int64 `json:"refusals_by_code,omitempty"`
	// TrustedSends are the sends to trusted numbers, among Sends;
	// Challenged the sends answered 428 challenge_required, among
	// Refusals (countries and totals; 0 for prefixes).
	TrustedSends int64 `json:"trusted_sends"`
	Challenged   int64 `json:"challenged"`
	// RiskLookups are the network risk score lookups (otp.risk) asked
	// for the sends.
	RiskLookups int64 `json:"risk_lookups"`
	// SolvedSends are the sends after a solved challenge, among Sends;
	// SolvedCapRefusals the sends the solved cap refused, among Refusals
	// (their code, unusual_volume, is the velocity rule's too).
	SolvedSends       int64 `json:"solved_sends"`
	SolvedCapRefusals int64 `json:"solved_cap_refusals"`
}

// AbuseLimit is a limit of the policy that applies to a country or prefix.
type AbuseLimit struct {
	Rule          string `json:"rule"` // e.g. "per_country", "prefix_depths[0]", "country_velocity"
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	Count         *int64 `json:"count,omitempty"` // country_velocity: the sends this clock hour
	Quarantined   bool   `json:"quarantined,omitempty"`
	// Override: an emergency override (Overrides) sets Limit, not the
	// policy file.
	Override bool `json:"override,omitempty"`
}

// AbuseCountry is one country's tally ("~other" for those past the cap).
type AbuseCountry struct {
	AbuseTally
	Country     string       `json:"country"`
	CallingCode string       `json:"calling_code,omitempty"`
	Limits      []AbuseLimit `json:"limits"`
	// Carriers are the country's carriers (at most 5, and every one an
	// override holds; the rest one "~other" row).
	Carriers []AbuseCarrier `json:"carriers,omitempty"`
	// Paused: a country_pause override holds it, PausedSecondsLeft more
	// seconds.
	Paused            bool  `json:"paused"`
	PausedSecondsLeft int64 `json:"paused_seconds_left,omitempty"`
	// SolvedCapSpent: the solved cap refused a send to it this clock hour.
	SolvedCapSpent bool `json:"solved_cap_spent"`
	// SolvedCap is the solved cap in force this clock hour; nil when
	// challenges are off and for "~other".
	SolvedCap *AbuseSolvedCap `json:"solved_cap,omitempty"`
}

// AbuseCarrier is one carrier of a country, as "NG / MTN".
type AbuseCarrier struct {
	AbuseTally
	Carrier     string       `json:"carrier"`      // its key: "mtn"; "unknown"; "~other"
	Name        string       `json:"name"`         // libphonenumber's spelling: "MTN"
	SubjectName string       `json:"subject_name"` // "NG / MTN"
	Limits      []AbuseLimit `json:"limits"`       // the carrier_limit override in force
	Paused      bool         `json:"paused"`       // a carrier_pause override holds
	// PausedSecondsLeft is, with Paused, the seconds until the pause ends.
	PausedSecondsLeft int64 `json:"paused_seconds_left,omitempty"`
	// SolvedCapSpent: the solved cap (or the carrier's share of it)
	// refused a send to it this clock hour.
	SolvedCapSpent bool `json:"solved_cap_spent"`
	// SolvedCap is the carrier's share of the solved cap in force this
	// clock hour; nil when the carriers do not split the country's room.
	SolvedCap *AbuseSolvedCap `json:"solved_cap,omitempty"`
}

// AbuseSolvedCap is the solved-challenge cap in force on a country or a
// carrier this clock hour, as the next send after a solved challenge
// would meet it.
type AbuseSolvedCap struct {
	Limit int64 `json:"limit"`
	// Used is the solved sends it holds this hour, less those their
	// verifies back.
	Used int64 `json:"used"`
	// Full: the next send after a solved challenge is refused.
	Full bool `json:"full"`
	// Cut: the solved tier's conversion watch cut it to a tenth.
	Cut bool `json:"cut"`
}

// AbusePrefix is one prefix's tally ("~other" for those past the cap).
type AbusePrefix struct {
	AbuseTally
	Prefix  string      `json:"prefix"`
	Country string      `json:"country,omitempty"`
	Limit   *AbuseLimit `json:"limit,omitempty"`
}

// AbuseWindow is the traffic of one window, the busiest countries and
// prefixes first.
type AbuseWindow struct {
	Since          time.Time      `json:"since"`
	Total          AbuseTally     `json:"total"`
	Countries      []AbuseCountry `json:"countries"`
	CountriesTotal int            `json:"countries_total"`
	Prefixes       []AbusePrefix  `json:"prefixes"`
	PrefixesTotal  int            `json:"prefixes_total"`
	// Services are each Verify service's traffic, the default service
	// first; empty when the policy file names no service.
	Services []AbuseService `json:"services,omitempty"`
}

// AbuseService is one service's traffic in a window: its totals and its
// busiest countries.
type AbuseService struct {
	AbuseTally
	// Service is the Verify service SID, or "default" for the default
	// service (the API keys' and the service marked default's).
	Service      string `json:"service"`
	Default      bool   `json:"default"`
	FriendlyName string `json:"friendly_name,omitempty"`
	// Countries are its busiest countries ("~other" for those past the
	// cap), CountriesTotal how many it has.
	Countries      []AbuseServiceCountry `json:"countries"`
	CountriesTotal int                   `json:"countries_total"`
}

// AbuseServiceCountry is one country of a service.
type AbuseServiceCountry struct {
	AbuseTally
	Country string `json:"country"`
}

// AbuseAlert is a live conversion or velocity alert.
type AbuseAlert struct {
	Rule        string    `json:"rule"`    // "conversion" or "velocity"
	Scope       string    `json:"scope"`   // "prefix" or "country"
	Subject     string    `json:"subject"` // the prefix or ISO region
	Country     string    `json:"country,omitempty"`
	Outcome     string    `json:"outcome"` // "reported", "blocked", "quarantined" or "unusual_volume"
	At          time.Time `json:"at"`
	Until       time.Time `json:"until"`
	SecondsLeft int64     `json:"seconds_left"`
	Detail      string    `json:"detail"`
	// Service is the SID of the Verify service whose sends the rule
	// judged; "" for the default service's.
	Service string `json:"service,omitempty"`
}

// AutoBlock is a deny-list entry the conversion watch made, with the time
// it has left.
type AutoBlock struct {
	DenyEntry
	SecondsLeft *int64 `json:"seconds_left,omitempty"`
}

// AbuseBlocks are the numbers refused now: how many, and the first 20.
type AbuseBlocks struct {
	Total int     `json:"total"`
	First []Block `json:"first"`
}

// Abuse reads the attack view: GET /ops/abuse. top is the rows per
// country and prefix list (0: otpguard's default, 10; at most 50).
// Retried like every GET.
func (c *Client) Abuse(ctx context.Context, top int) (*AbuseView, error) {
	q := url.Values{}
	setInt(q, "top", int64(top))
	return opsGet[AbuseView](ctx, c, "/ops/abuse", q)
}
