package opsweb

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// Sizes of the page's lists.
const (
	pageBlocks = 25
	// pageEvents is a phone's worth of events: older ones on demand.
	pageEvents = 25
	chartMins  = 60
)

type opsPage struct {
	Actor, CSRF    string
	Phone, Country string // the blocked list's filter
	Flash, Problem string

	// The attack view (abuse.go), at the top of the page, and its alerts
	// with the actions that answer them (alerts_page.go).
	Abuse    *abuseJSON
	AbuseErr string
	Alerts   []pageAlert
	// State is this instance's health: shown whether or not the attack
	// view could be read (nil: the server has no attack view).
	State *State
	// Trust: the page offers the trusted-number import (trust_page.go);
	// TrustProblem says why the last one was refused.
	Trust        bool
	TrustProblem string
	// Refresh is how often the page reloads itself, in seconds (0: paused);
	// RefreshURL turns it off, or on again.
	Refresh    int
	RefreshURL string

	Blocked      []pageBlock
	BlockedTotal int
	BlockedErr   string
	// BlockedPrev and BlockedNext page the blocked list ("" at an end).
	BlockedFrom, BlockedTo   int
	BlockedPrev, BlockedNext string
	Deny                     []pageDeny
	DenyErr                  string
	DenyForm                 denyForm
	Events                   []guard.Event
	EventsErr                string
	Ev                       eventQuery
	// EventsOlder pages back; EventsNewest returns to the first page.
	EventsOlder, EventsNewest string
	Chart                     *chart
	ChartErr                  string
	// Overrides is the emergency overrides' section (overrides.go).
	Overrides overridesSection
	// DatabaseDown shows the banner: the ops database did not answer (or
	// is not connected yet), so the parts it holds are not shown.
	DatabaseDown bool
	// Sections holds the data of sections defined in other template files
	// (e.g. "overrides"), by name, so that adding one needs no new field.
	Sections map[string]any
}

type pageBlock struct {
	blockedItem
	Left string
}

// pageDeny is a deny-list row: the entry and the countries it covers.
type pageDeny struct {
	denyEntry
	Countries string
}

// denyForm is what was typed into the deny-list form, kept when it is
// refused, with the refusal per field.
type denyForm struct {
	Pattern, Reason, ExpiresIn string
	Errors                     map[string]string
	// WholeCountries names the countries the pattern refuses entirely:
	// the form then asks for an explicit confirmation.
	WholeCountries string
}

// eventQuery is the event list's filter as typed.
type eventQuery struct {
	Action, Outcome, Number, Country, Since, Until string
	// Service is a Verify service SID (VA...): that service's events;
	// or default (DefaultServiceParam): the events that name none.
	Service string
	Before  int64
}

// refreshEvery is how often the page reloads itself by default.
const refreshEvery = 30

// Page: GET /ops. The ops page: the attack view, blocked numbers, the
// deny-list, recent events and a chart of the last hour. A part whose
// store fails shows the failure; the rest still renders.
func (s *Pages) Page(c echo.Context) error {
	p := s.loadPage(c, denyForm{})
	return render(c, http.StatusOK, "ops.html", p)
}

// loadPage reads every part of the page for the request's query.
func (s *Pages) loadPage(c echo.Context, form denyForm) opsPage {
	ctx := c.Request().Context()
	q := c.QueryParams()
	p := opsPage{Actor: actorFrom(c), Phone: q.Get("phone"), Country: q.Get("country"), DenyForm: form, Sections: map[string]any{}}
	if sess, ok := c.Get(ctxSession).(string); ok {
		p.CSRF = s.sessions.csrf(sess)
	}
	p.Flash = doneMessages[q.Get("done")]
	if code := q.Get("err"); code != "" {
		p.Problem = problemMessage(problem.Code(code))
	}
	p.Refresh, p.RefreshURL = refreshEvery, pageURL(q, "refresh", "0")
	if q.Get("refresh") == "0" {
		p.Refresh, p.RefreshURL = 0, pageURL(q, "refresh", "")
	}
	now := s.ops.Now()

	if s.view.abuse != nil {
		st := s.view.instanceState()
		p.State = &st
		v, err := s.view.read(ctx, 8)
		if err != nil {
			p.AbuseErr = s.partFailed(c, "the attack view", err)
		}
		p.Abuse = v
		p.Alerts = pageAlerts(v, s.ops.FilePolicy())
	}
	p.Trust, p.TrustProblem = s.trust != nil, trustProblem(problem.Code(q.Get(qTrustErr)))
	if q.Get("done") == "trusted" {
		p.Flash = trustedFlash(q)
	}

	s.loadBlocked(c, &p, now)
	s.loadDatabaseParts(c, &p)
	p.Overrides = s.overridesFor(c, p.CSRF, p.DatabaseDown)
	s.loadSearch(c, &p) // search.go
	s.loadStatus(&p)    // status.go
	return p
}

// loadBlocked reads the page of blocked numbers the query asks for.
func (s *Pages) loadBlocked(c echo.Context, p *opsPage, now time.Time) {
	ctx, q := c.Request().Context(), c.QueryParams()
	offset, _ := strconv.Atoi(q.Get("offset"))
	offset = min(max(0, offset), ops.MaxBlockOffset)
	page, err := s.ops.Blocked(ctx, ops.BlockFilter{Phone: p.Phone, Country: p.Country, Limit: pageBlocks, Offset: offset, SkipDeny: true})
	if err != nil {
		p.BlockedErr = s.partFailed(c, "blocked numbers", err)
	}
	p.BlockedTotal = page.Total
	for _, b := range page.Blocks {
		p.Blocked = append(p.Blocked, pageBlock{blockedItem: toBlockedItem(b, now), Left: timeLeft(b.Until, now)})
	}
	p.BlockedFrom, p.BlockedTo = offset+1, offset+len(p.Blocked)
	if offset > 0 {
		p.BlockedPrev = pageURL(q, "offset", strconv.Itoa(max(0, offset-pageBlocks)))
	}
	if offset+len(p.Blocked) < page.Total {
		p.BlockedNext = pageURL(q, "offset", strconv.Itoa(offset+pageBlocks))
	}
}

// loadDatabaseParts reads the parts the ops database holds: the deny-list,
// the events, the chart and the services' counts.
func (s *Pages) loadDatabaseParts(c echo.Context, p *opsPage) {
	ctx, q := c.Request().Context(), c.QueryParams()
	// The parts the database holds. Once it has failed to answer, the rest
	// are not asked: the page answers within one database timeout.
	dbPart := func(what string, load func() error) string {
		if p.DatabaseDown {
			return "Could not load " + what + ": " + problemMessage(problem.CodeDatabaseUnavailable)
		}
		err := load()
		if err == nil {
			return ""
		}
		p.DatabaseDown = problem.CodeOf(err) == problem.CodeDatabaseUnavailable
		return s.partFailed(c, what, err)
	}
	p.DenyErr = dbPart("the deny-list", func() error {
		entries, err := s.ops.DenyEntries(ctx)
		for _, e := range entries {
			p.Deny = append(p.Deny, pageDeny{denyEntry: toDenyEntry(e), Countries: regionList(ops.PatternRegions(e.Pattern), 3)})
		}
		return err
	})
	f, ev, ferr := pageEventFilter(q)
	p.Ev = ev
	if ferr != nil {
		p.EventsErr = ferr.Error()
	} else {
		p.EventsErr = dbPart("events", func() (err error) {
			p.Events, err = s.ops.Events(ctx, f)
			return err
		})
		if len(p.Events) > pageEvents {
			p.Events = p.Events[:pageEvents]
			p.EventsOlder = pageURL(q, "before", strconv.FormatInt(p.Events[len(p.Events)-1].ID, 10)) + "#events"
		}
		if f.BeforeID > 0 {
			p.EventsNewest = pageURL(q, "before", "") + "#events"
		}
	}
	p.ChartErr = dbPart("the chart", func() error {
		act, err := s.ops.Activity(ctx, chartMins)
		if err == nil {
			p.Chart = newChart(act)
		}
		return err
	})
	s.loadServices(c, p, dbPart) // services.go
}

// pageURL is the page's URL with the query q and one parameter set (or
// removed, when v is empty); the flash messages are dropped.
func pageURL(q url.Values, k, v string) string {
	n := url.Values{}
	for key, vals := range q {
		if key != "done" && key != "err" {
			n[key] = vals
		}
	}
	if v == "" {
		n.Del(k)
	} else {
		n.Set(k, v)
	}
	if len(n) == 0 {
		return "/ops"
	}
	return "/ops?" + n.Encode()
}

// regionList names up to n regions: "US, CA and 23 more".
func regionList(regions []string, n int) string {
	if len(regions) <= n {
		return strings.Join(regions, ", ")
	}
	return strings.Join(regions[:n], ", ") + fmt.Sprintf(" and %d more", len(regions)-n)
}

// fieldError is a refusal of one field of a filter or form.
type fieldError struct{ field, msg string }

func (e fieldError) Error() string { return e.field + ": " + e.msg }

// pageEventFilter reads the event filter of the page: action, outcome,
// number or prefix, country, Verify service, since, until (RFC 3339 or
// the browser's 2006-01-02T15:04, UTC) and before (an event ID).
func pageEventFilter(q url.Values) (ops.EventFilter, eventQuery, error) {
	ev := eventQuery{Action: q.Get("action"), Outcome: q.Get("outcome"), Number: q.Get("number"),
		Country: q.Get("ev_country"), Since: q.Get("since"), Until: q.Get("until"), Service: q.Get("service")}
	// One more than a page: "older" is linked only when there is an
	// older event, never to an empty page after a full one.
	f := ops.EventFilter{Limit: pageEvents + 1}
	for _, v := range []struct{ name, val string }{{"Action", ev.Action}, {"Outcome", ev.Outcome}} {
		if len(v.val) > 64 || !ops.PlainText(v.val) || strings.ContainsAny(v.val, " <>\"'") {
			return f, ev, fieldError{v.name, "a name such as otp.send or phone_rate_limited"}
		}
	}
	f.Action, f.Outcome = strings.TrimSpace(ev.Action), strings.TrimSpace(ev.Outcome)
	if n := strings.TrimSpace(ev.Number); n != "" {
		if guard.ValidateDenyPattern(n) != nil {
			return f, ev, fieldError{"Number or prefix", "+ and 1 to 15 digits, like +9198 or +919800000000"}
		}
		f.PhonePrefix = n
	}
	if c := strings.ToUpper(strings.TrimSpace(ev.Country)); c != "" {
		if len(c) != 2 || strings.Trim(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return f, ev, fieldError{"Country", "two letters, like IN"}
		}
		f.Country = c
	}
	switch sid := strings.TrimSpace(ev.Service); {
	case sid == DefaultServiceParam:
		f.DefaultService = true
	case sid != "" && !guard.ValidSID(sid, "VA"):
		return f, ev, fieldError{"Service", "a Verify service SID (VA and 32 hex digits) or default"}
	case sid != "":
		f.Service = sid
	}
	for _, t := range []struct {
		name string
		val  string
		dst  *time.Time
	}{{"From", ev.Since, &f.Since}, {"To", ev.Until, &f.Until}} {
		if t.val == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.val)
		if err != nil {
			v, err = time.Parse("2006-01-02T15:04", t.val)
		}
		if err != nil {
			return f, ev, fieldError{t.name, "a time like 2026-03-01T12:00 (UTC)"}
		}
		*t.dst = v
	}
	if b := q.Get("before"); b != "" {
		id, err := strconv.ParseInt(b, 10, 64)
		if err != nil || id < 1 {
			return f, ev, fieldError{"before", "an event ID"}
		}
		f.BeforeID, ev.Before = id, id
	}
	return f, ev, nil
}

// partFailed logs why a part of the page failed and says so, safely.
func (s *Pages) partFailed(c echo.Context, what string, err error) string {
	code := problem.CodeOf(err)
	if status := httpx.Status(code); status >= 500 || status == 0 {
		s.log.ErrorContext(c.Request().Context(), "ops page: loading "+what+" failed", "request_id", httpx.RequestID(c), "err", err)
	}
	return "Could not load " + what + ": " + problemMessage(code)
}
