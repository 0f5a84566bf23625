package ops

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// The attack view's counters (GET /ops/abuse, the top of /ops). Every
// instance sees the same figures because they live in the shared store,
// one small hash per clock hour and dimension:
//
//	countries: "<REGION>|s" sent, "|t" sent to trusted numbers, "|v" verified, "|r" refused, "|r:<code>" refused by code, "|k" risk lookups asked,
//	           "|solved" sent after a solved challenge, "|solved_cap" refused by the solved cap (abuse_solved.go)
//	prefixes:  "<prefix>|<REGION>|<depth>|s" (and v, r): depth 0 is
//	           per_prefix, depth i prefix_depths[i-1]
//	carriers:  "<REGION>|<carrier key>|<carrier name>|s" (and v, r,
//	           r:challenge_required, solved, solved_cap): the number's original carrier
//	           (guard.CarrierOf), keyed by its normalised key, its name
//	           kept for people; past the cap a country's new carriers count
//	           as "<REGION>|~other|other|<kind>"
//	services:  "<service>|<REGION>|s" (and v, r, r:<code>): the service's
//	           SID, "~default" for the default service (abuse_services.go);
//	           counted only when the policy file names services; past the
//	           cap a service's new countries count as "<service>|~other|<kind>"
//
// They are counted from the audit events the OTP rules already emit (the
// AbuseRecorder is an EventSink beside the audit queue), in memory, and
// added to the store in one atomic step per second and instance: no extra
// round trip on the send or verify path, and a bounded cost whatever the
// traffic. The hashes are capped (AbuseCaps): a subject met once the cap
// is reached counts under "~other", so a campaign over a million numbers
// cannot grow them. They expire AbuseTTL after their hour.

// AbuseTTL is how long an hour's counters are kept: the day view and an hour to spare.
const AbuseTTL = 25 * time.Hour

// Caps on the fields of one hour's hash.
const (
	MaxCountryFields = 1200 // ~250 regions x (s, v, r) and the refusal codes met
	MaxPrefixFields  = 900  // 300 prefixes x (s, v, r)
	MaxCarrierFields = 1800 // 300 carriers of the countries met x (s, v, r, challenged, solved, solved_cap)
	MaxServiceFields = 2400 // e.g. 10 services x 60 countries x (s, v, r and a refusal code)
	// maxPendingFields bounds what one instance holds while the store does
	// not answer; past it, new counts are dropped (and counted).
	maxPendingFields = 20000
)

// OtherField is the subject a capped hash counts new subjects under.
const OtherField = "~other"

// AbuseCounts are the counts one instance adds for one clock hour.
type AbuseCounts struct {
	Hour      int64 // unix seconds / 3600 of the service's clock
	Countries map[string]int64
	Prefixes  map[string]int64
	Carriers  map[string]int64
	Services  map[string]int64
}

// AbuseAlert is an alert of the conversion watch or the country velocity
// rule, shown until it ends.
type AbuseAlert struct {
	Scope   string // "prefix", "country" or "carrier"
	Subject string // the prefix (+91987650), the region (NG) or the carrier ("NG / MTN")
	Country string
	Rule    string // "conversion" or "velocity"
	// Service is the SID of the service whose sends the rule judged; ""
	// the default service's (and every alert before services counted
	// apart): two services' alerts on one subject are two alerts.
	Service string
	Outcome string // reported, blocked, quarantined, unusual_volume
	At      time.Time
	Until   time.Time
	Detail  string
}

// AbuseHour is one hour's counters as read back.
type AbuseHour struct {
	Hour      int64
	Countries map[string]int64
	Prefixes  map[string]int64
	Carriers  map[string]int64
	Services  map[string]int64
}

// Budget window as read back: the counter and how long it still runs.
type BudgetWindow struct {
	Used     int64
	ResetsIn time.Duration // 0: no window running
}

// AbuseData is what the attack view reads from the store in one round trip.
type AbuseData struct {
	Hours     []AbuseHour
	Alerts    []AbuseAlert
	BudgetHr  BudgetWindow
	BudgetDay BudgetWindow
}

// CountryVolume is a country's velocity state in the hour under way.
type CountryVolume struct {
	Sends           int64
	Baseline        int64 // -1: not computed yet this hour
	Quarantined     bool
	QuarantineUntil time.Time
}

// AbuseCounters keeps the attack view's counters in the shared store.
type AbuseCounters interface {
	// AddAbuse adds counts and alerts in one atomic step per hour.
	AddAbuse(ctx context.Context, counts []AbuseCounts, alerts []AbuseAlert, now time.Time) error
	// ReadAbuse reads the hours given, the live alerts and the budget.
	ReadAbuse(ctx context.Context, hours []int64) (AbuseData, error)
	// ReadVolumes reads the velocity state of the countries in hour.
	ReadVolumes(ctx context.Context, regions []string, hour int64) ([]CountryVolume, error)
	// ReadSolvedCaps reads, without counting, the solved cap in force of
	// each take (guard.SolvedCapTake) as a send's take would meet it.
	ReadSolvedCaps(ctx context.Context, takes []guard.VolumeTake) ([]SolvedCap, error)
}

// AbuseRecorderOptions configure an AbuseRecorder.
type AbuseRecorderOptions struct {
	Store  AbuseCounters
	Policy func() guard.OTPPolicy
	// Services are the policy file's services in force; nil or none: the
	// recorder counts no service rows (abuse_services.go).
	Services func() []guard.Service
	Every    time.Duration // flush interval; 1 s when 0
	Logger   *slog.Logger
	Now      func() time.Time
}

// AbuseRecorder counts the OTP rules' events for the attack view and adds
// them to the shared store every second. Record never blocks on the store.
type AbuseRecorder struct {
	o AbuseRecorderOptions

	mu      sync.Mutex
	pending map[int64]*AbuseCounts
	fields  int
	alerts  []AbuseAlert
	dropped int64
}

var _ guard.EventSink = (*AbuseRecorder)(nil)

// NewAbuseRecorder returns a recorder; Run flushes it.
func NewAbuseRecorder(o AbuseRecorderOptions) *AbuseRecorder {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &AbuseRecorder{o: o, pending: map[int64]*AbuseCounts{}}
}

// Region names a country in the counters: the ISO region, "001" for
// non-geographic numbers (as the velocity rule names them).
func Region(r string) string {
	if r == "" {
		return "001"
	}
	return r
}

// Record counts one event: sends, refusals and verifications by country,
// carrier and prefix, and the alerts of the conversion watch and velocity rule.
func (a *AbuseRecorder) Record(e guard.Event) {
	switch e.Action {
	case guard.ActionOTPSend, guard.ActionOTPVerify:
		if e.Phone == "" { // a number that did not parse: no subject
			return
		}
		var kinds []string
		switch {
		case e.Action == guard.ActionOTPVerify && e.Outcome == guard.OutcomeValid:
			kinds = []string{"v"}
		case e.Action == guard.ActionOTPVerify:
			return
		case e.Outcome == guard.OutcomeSent && e.Trusted:
			kinds = []string{"s", "t"} // prefixes count the first kind only
		case e.Outcome == guard.OutcomeSent:
			kinds = []string{"s"}
		default:
			kinds = []string{"r", "r:" + e.Outcome}
		}
		if e.Solved && e.Action == guard.ActionOTPSend { // a send after a solved challenge (abuse_solved.go)
			kinds = solvedKinds(kinds, e.Outcome == guard.OutcomeSent)
		}
		a.count(e, kinds)
	case guard.ActionRiskLookup: // the country's lookups asked (none over the budget)
		if e.Outcome != "over_budget" {
			a.count(e, []string{"k"})
		}
	case guard.ActionConversion, guard.ActionVelocity:
		if al, ok := a.alertOf(e); ok {
			a.mu.Lock()
			if len(a.alerts) < 1000 {
				a.alerts = append(a.alerts, al)
			}
			a.mu.Unlock()
		}
	}
}

func (a *AbuseRecorder) count(e guard.Event, kinds []string) {
	region := Region(e.Country)
	p := a.o.Policy()
	h := e.At.Unix() / 3600
	carrier := carrierField(e.Phone, region) // libphonenumber, outside the lock
	service, byService := a.serviceField(e.Service)
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.pending[h]
	if c == nil {
		c = newAbuseCounts(h)
		a.pending[h] = c
	}
	add := func(m map[string]int64, f string) {
		if _, ok := m[f]; !ok {
			if a.fields >= maxPendingFields {
				a.dropped++
				return
			}
			a.fields++
		}
		m[f]++
	}
	for _, k := range kinds {
		add(c.Countries, region+"|"+k)
		if carrierKind(k) {
			add(c.Carriers, carrier+k)
		}
		if byService && serviceKind(k) {
			add(c.Services, service+"|"+region+"|"+k)
		}
	}
	seen := map[string]bool{"": e.Phone == ""} // no number (a risk lookup's event): no prefix
	for depth, pw := range p.PrefixLimits() {
		prefix := guard.Prefix(e.Phone, pw.DigitsDropped)
		if seen[prefix] {
			continue
		}
		seen[prefix] = true
		for _, k := range kinds[:1] { // prefixes: s, v or r, not by code
			add(c.Prefixes, prefix+"|"+region+"|"+strconv.Itoa(depth)+"|"+k)
		}
	}
}

// alertOf reads an alert from the event the rule recorded: its detail
// starts with "<scope>=<subject> " (guard/conversion.go, velocity.go). A
// carrier's subject is its canonical form, "carrier=NG/mtn", shown as
// "NG / MTN" (guard.CarrierSubjectName).
func (a *AbuseRecorder) alertOf(e guard.Event) (AbuseAlert, bool) {
	head, _, _ := strings.Cut(e.Detail, " ")
	scope, subject, ok := strings.Cut(head, "=")
	if !ok || (scope != "prefix" && scope != "country" && scope != "carrier") || subject == "" || len(subject) > 40 {
		return AbuseAlert{}, false
	}
	if scope == "carrier" {
		subject = guard.CarrierSubjectName(subject)
	}
	al := AbuseAlert{Scope: scope, Subject: subject, Country: Region(e.Country), Service: e.Service, Outcome: e.Outcome, At: e.At,
		Detail: e.Detail}
	p := a.o.Policy()
	switch e.Action {
	case guard.ActionVelocity: // until the clock hour ends
		al.Rule = "velocity"
		al.Until = time.Unix((e.At.Unix()/3600+1)*3600, 0)
	default:
		al.Rule = "conversion"
		period := guard.ConversionWindow
		switch {
		case e.Outcome == guard.OutcomeQuarantined:
			period = p.CountryVelocity.QuarantineFor
		case p.Conversion.Mode == guard.ConversionBlock:
			period = p.Conversion.BlockFor
		}
		al.Until = e.At.Add(period)
	}
	if len(al.Detail) > 500 {
		al.Detail = al.Detail[:500]
	}
	return al, true
}

// Run flushes every interval until ctx ends, then once more.
func (a *AbuseRecorder) Run(ctx context.Context) {
	t := time.NewTicker(a.o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := a.Flush(fctx); err != nil {
				a.o.Logger.Warn("attack view: last flush failed; its counts are lost", "err", err)
			}
			cancel()
			return
		case <-t.C:
			if err := a.Flush(ctx); err != nil {
				a.o.Logger.Debug("attack view: flush failed; kept for the next", "err", err)
			}
		}
	}
}

// Flush adds what was counted since the last flush to the store. When the
// store fails the counts are kept for the next flush (never counted twice
// by a retry of the same call: they are merged back only when the call
// surely did not run, i.e. it failed).
func (a *AbuseRecorder) Flush(ctx context.Context) error {
	a.mu.Lock()
	pending, alerts := a.pending, a.alerts
	a.pending, a.alerts, a.fields = map[int64]*AbuseCounts{}, nil, 0
	dropped := a.dropped
	a.dropped = 0
	a.mu.Unlock()
	if dropped > 0 {
		a.o.Logger.Warn("attack view: counts dropped while the store did not answer", "dropped", dropped)
	}
	if len(pending) == 0 && len(alerts) == 0 {
		return nil
	}
	counts := make([]AbuseCounts, 0, len(pending))
	for _, c := range pending {
		counts = append(counts, *c)
	}
	err := a.o.Store.AddAbuse(ctx, counts, alerts, a.o.Now())
	if err != nil && problem.CodeOf(err) != problem.CodeOverloaded {
		// A failed (not timed out) call: keep the counts for the next flush.
		// A call that timed out may have run: dropped rather than doubled.
		if ctx.Err() == nil && !isTimeout(err) {
			a.mergeBack(counts, alerts)
		}
	}
	return err
}

func (a *AbuseRecorder) mergeBack(counts []AbuseCounts, alerts []AbuseAlert) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range counts {
		p := a.pending[c.Hour]
		if p == nil {
			p = newAbuseCounts(c.Hour)
			a.pending[c.Hour] = p
		}
		for _, m := range [][2]map[string]int64{{p.Countries, c.Countries}, {p.Prefixes, c.Prefixes}, {p.Carriers, c.Carriers}, {p.Services, c.Services}} {
			for f, n := range m[1] {
				if _, ok := m[0][f]; !ok {
					if a.fields >= maxPendingFields {
						a.dropped += n
						continue
					}
					a.fields++
				}
				m[0][f] += n
			}
		}
	}
	a.alerts = append(alerts, a.alerts...)
	if len(a.alerts) > 1000 {
		a.alerts = a.alerts[:1000]
	}
}

// isTimeout reports a call that may have run: it timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// Tee hands every event to each sink in turn (the audit queue and the
// attack view's recorder).
func Tee(sinks ...guard.EventSink) guard.EventSink { return tee(sinks) }

type tee []guard.EventSink

func (t tee) Record(e guard.Event) {
	for _, s := range t {
		s.Record(e)
	}
}
