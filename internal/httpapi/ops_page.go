package httpapi

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/ops"
)

//go:embed ops_templates/*.html ops_templates/ops.js
var opsTemplateFS embed.FS

// opsScript is the page's one script (ops_templates/ops.js): confirmations
// and refreshing the live parts in place. The page works without it.
var opsScript = mustRead(opsTemplateFS, "ops_templates/ops.js")

// opsTemplates are parsed once; they are never changed afterwards.
var opsTemplates = template.Must(template.New("ops").Funcs(pageFuncs).ParseFS(opsTemplateFS, "ops_templates/*.html"))

// opsPageCSP allows the page nothing but itself: inline styles and inline
// SVG, its one script (by hash), fetches of itself, forms only to itself,
// no framing.
var opsPageCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; script-src 'sha256-" + sha256b64(opsScript) +
	"'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func mustRead(fs embed.FS, name string) string {
	b, err := fs.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func sha256b64(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// budgetView is one budget card.
type budgetView struct {
	Name    string
	W       abuseBudgetWindowJSON
	Percent int64
}

// windowView is one window of the attack view as the page lays it out.
type windowView struct {
	Name, Key string
	W         *abuseWindowJSON
}

var pageFuncs = template.FuncMap{
	"join": strings.Join,
	// opsScript is the script element; its text is a constant of the
	// binary, allowed by its hash in the CSP.
	"opsScript": func() template.HTML { return template.HTML("<script>" + opsScript + "</script>") },
	"pct": func(r *float64) string {
		if r == nil {
			return "–"
		}
		return strconv.FormatFloat(*r*100, 'f', 0, 64) + " %"
	},
	// low marks a conversion below the watch's default min_rate.
	"low": func(r *float64) bool { return r != nil && *r < guard.DefaultMinRate },
	"limit": func(l abuseLimitJSON) string {
		w := (time.Duration(l.WindowSeconds) * time.Second).String()
		switch {
		case l.WindowSeconds%3600 == 0 && l.WindowSeconds > 0:
			w = strconv.FormatInt(l.WindowSeconds/3600, 10) + " h"
		case l.WindowSeconds%60 == 0 && l.WindowSeconds > 0:
			w = strconv.FormatInt(l.WindowSeconds/60, 10) + " min"
		}
		out := fmt.Sprintf("%d per %s (%s)", l.Limit, w, l.Rule)
		if l.Count != nil {
			out = fmt.Sprintf("%d of %d this hour (%s)", *l.Count, l.Limit, l.Rule)
		}
		if l.Quarantined {
			out += ", quarantined"
		}
		return out
	},
	"left": func(secs int64) string { return timeLeft(time.Unix(secs, 0), time.Unix(0, 0)) },
	"budget": func(name string, w abuseBudgetWindowJSON) budgetView {
		v := budgetView{Name: name, W: w}
		if w.Limit > 0 {
			v.Percent = min(100, w.Used*100/w.Limit)
		}
		return v
	},
	"windows": func(v *abuseJSON) []windowView {
		var out []windowView
		if v.LastHour != nil {
			out = append(out, windowView{"last hour", "hour", v.LastHour})
		}
		if v.LastDay != nil {
			out = append(out, windowView{"last day", "day", v.LastDay})
		}
		return out
	},
}

// Sizes of the page's lists.
const (
	pageBlocks = 25
	pageEvents = 50
	chartMins  = 60
)

// render writes the named template, or a problem when it fails (before
// anything was written).
func (s *Server) render(c echo.Context, status int, name string, data any) error {
	var b bytes.Buffer
	if err := opsTemplates.ExecuteTemplate(&b, name, data); err != nil {
		return fmt.Errorf("httpapi: render %s: %w", name, err)
	}
	h := c.Response().Header()
	h.Set("Content-Security-Policy", opsPageCSP)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	return c.HTMLBlob(status, b.Bytes())
}

type opsPage struct {
	Actor, CSRF    string
	Phone, Country string // the blocked list's filter
	Flash, Problem string

	// The attack view (ops_abuse.go), at the top of the page.
	Abuse    *abuseJSON
	AbuseErr string
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
	// Overrides is the emergency overrides' section (ops_overrides.go).
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
	Before                                         int64
}

// refreshEvery is how often the page reloads itself by default.
const refreshEvery = 30

// opsPage: GET /ops. The ops page: the attack view, blocked numbers, the
// deny-list, recent events and a chart of the last hour. A part whose
// store fails shows the failure; the rest still renders.
func (s *Server) opsPage(c echo.Context) error {
	p := s.loadPage(c, denyForm{})
	return s.render(c, http.StatusOK, "ops.html", p)
}

// loadPage reads every part of the page for the request's query.
func (s *Server) loadPage(c echo.Context, form denyForm) opsPage {
	ctx := c.Request().Context()
	q := c.QueryParams()
	p := opsPage{Actor: actorFrom(c), Phone: q.Get("phone"), Country: q.Get("country"), DenyForm: form, Sections: map[string]any{}}
	if sess, ok := c.Get(ctxSession).(string); ok {
		p.CSRF = s.sessions.csrf(sess)
	}
	p.Flash = doneMessages[q.Get("done")]
	if code := q.Get("err"); code != "" {
		p.Problem = problemMessage(guard.Code(code))
	}
	p.Refresh, p.RefreshURL = refreshEvery, pageURL(q, "refresh", "0")
	if q.Get("refresh") == "0" {
		p.Refresh, p.RefreshURL = 0, pageURL(q, "refresh", "")
	}
	now := s.ops.Now()

	if s.abuse != nil {
		v, err := s.abuseView(ctx, 8)
		if err != nil {
			p.AbuseErr = s.partFailed(c, "the attack view", err)
		}
		p.Abuse = v
	}

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

	// The parts the database holds. Once it has failed to answer, the rest
	// are not asked: the page answers within one database timeout.
	dbPart := func(what string, load func() error) string {
		if p.DatabaseDown {
			return "Could not load " + what + ": " + problemMessage(guard.CodeDatabaseUnavailable)
		}
		err := load()
		if err == nil {
			return ""
		}
		p.DatabaseDown = guard.ErrorCode(err) == guard.CodeDatabaseUnavailable
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
	p.Overrides = s.overridesFor(c, p.CSRF, p.DatabaseDown)
	return p
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
// number or prefix, country, since, until (RFC 3339 or the browser's
// 2006-01-02T15:04, UTC) and before (an event ID).
func pageEventFilter(q url.Values) (ops.EventFilter, eventQuery, error) {
	ev := eventQuery{Action: q.Get("action"), Outcome: q.Get("outcome"), Number: q.Get("number"),
		Country: q.Get("ev_country"), Since: q.Get("since"), Until: q.Get("until")}
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
func (s *Server) partFailed(c echo.Context, what string, err error) string {
	code := guard.ErrorCode(err)
	if status := httpx.Status(code); status >= 500 || status == 0 {
		s.log.ErrorContext(c.Request().Context(), "ops page: loading "+what+" failed", "request_id", httpx.RequestID(c), "err", err)
	}
	return "Could not load " + what + ": " + problemMessage(code)
}

// doneMessages are the page's confirmations, by the done parameter.
var doneMessages = map[string]string{
	"unblocked": "Unblocked: the number may receive a code again.",
	"denied":    "Added to the deny-list. Every instance enforces it within seconds.",
	"undenied":  "Removed from the deny-list.",
}

// problemMessage is what the page says of a refusal: fixed text per code,
// so that no query parameter can put words on the page.
func problemMessage(code guard.Code) string {
	switch code {
	case guard.CodeInvalidPhone:
		return "that is not a valid phone number."
	case guard.CodeInvalidRequest:
		return "check the form: a pattern is + and 1 to 15 digits, an expiry a duration like 30m or 24h."
	case guard.CodeNotFound:
		return "that entry no longer exists."
	case guard.CodeStoreUnavailable:
		return "the store is unavailable; try again shortly."
	case guard.CodeDatabaseUnavailable:
		return "the ops database is unreachable; try again shortly."
	case guard.CodeForbidden:
		return "the form has expired; reload the page."
	}
	return "the action failed."
}

// confirmPage asks, without JavaScript, to confirm an action: the form
// posts again with confirmed=1. (With JavaScript the page asks with
// confirm() and sends confirmed=1 at once.)
type confirmPage struct {
	CSRF, Action, Message, Button string
	Fields                        map[string]string
}

func (s *Server) confirm(c echo.Context, action, message, button string, fields map[string]string) error {
	p := confirmPage{Action: action, Message: message, Button: button, Fields: fields}
	if sess, ok := c.Get(ctxSession).(string); ok {
		p.CSRF = s.sessions.csrf(sess)
	}
	return s.render(c, http.StatusOK, "confirm.html", p)
}

func confirmed(c echo.Context) bool { return c.Request().PostFormValue("confirmed") == "1" }

// formUnblock: POST /ops/actions/unblock. The page's unblock button; asks
// for a confirmation naming the number first (confirmed=1 skips it).
func (s *Server) formUnblock(c echo.Context) error {
	phone := strings.TrimSpace(c.Request().PostFormValue("phone"))
	if !confirmed(c) {
		return s.confirm(c, "/ops/actions/unblock", "Unblock "+phone+"? Its limits are cleared and it may receive a code at once.",
			"Unblock "+phone, map[string]string{"phone": phone})
	}
	_, err := s.ops.Unblock(c.Request().Context(), phone, actorFrom(c))
	return s.backToPage(c, "unblocked", err)
}

// formDeny: POST /ops/actions/deny. The page's deny-list form: pattern,
// reason and expires_in (a duration such as 30m or 24h; empty for never).
// A field it refuses is named and the page keeps what was typed; a pattern
// that covers whole countries (+1) needs confirm_country=yes.
func (s *Server) formDeny(c echo.Context) error {
	form := c.Request().PostFormValue
	f := denyForm{Pattern: strings.TrimSpace(form("pattern")), Reason: strings.TrimSpace(form("reason")),
		ExpiresIn: strings.TrimSpace(form("expires_in")), Errors: map[string]string{}}
	e := guard.DenyEntry{Pattern: f.Pattern, Reason: f.Reason}
	if guard.ValidateDenyPattern(f.Pattern) != nil {
		f.Errors["pattern"] = "Enter + and 1 to 15 digits, like +88213 or +919800000000."
	}
	if utf8.RuneCountInString(f.Reason) > ops.MaxDenyReason || !ops.PlainText(f.Reason) {
		f.Errors["reason"] = fmt.Sprintf("At most %d characters of plain text.", ops.MaxDenyReason)
	}
	if v := f.ExpiresIn; v != "" && v != "never" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > ops.MaxDenyFor {
			f.Errors["expires_in"] = "Enter a duration such as 30m, 24h or 720h (at most 10 years), or leave it empty for never."
		} else {
			t := s.ops.Now().Add(d)
			e.ExpiresAt = &t
		}
	}
	if len(f.Errors) == 0 {
		if whole := ops.WholeCountries(f.Pattern); len(whole) > 0 && form("confirm_country") != "yes" {
			f.WholeCountries = regionList(whole, 6)
			f.Errors["confirm_country"] = fmt.Sprintf("%s refuses every number of %s. Tick the box to confirm.", f.Pattern, f.WholeCountries)
		}
	}
	if len(f.Errors) > 0 {
		p := s.loadPage(c, f)
		return s.render(c, http.StatusBadRequest, "ops.html", p)
	}
	_, err := s.ops.AddDeny(c.Request().Context(), e, actorFrom(c))
	return s.backToPage(c, "denied", err)
}

// formUndeny: POST /ops/actions/undeny. The page's deny-list remove
// button; asks for a confirmation naming the pattern first.
func (s *Server) formUndeny(c echo.Context) error {
	raw := c.Request().PostFormValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return s.backToPage(c, "", guard.Errorf(guard.CodeInvalidRequest, "id must be a positive integer"))
	}
	if !confirmed(c) {
		what := "deny-list entry " + raw
		if entries, err := s.ops.DenyEntries(c.Request().Context()); err == nil {
			for _, e := range entries {
				if e.ID == id {
					what = e.Pattern
				}
			}
		}
		return s.confirm(c, "/ops/actions/undeny", "Remove "+what+" from the deny-list? Codes may be sent to it again at once.",
			"Remove "+what, map[string]string{"id": raw})
	}
	return s.backToPage(c, "undenied", s.ops.RemoveDeny(c.Request().Context(), id, actorFrom(c)))
}

// backToPage answers a form with 303 to the page, which says what happened.
func (s *Server) backToPage(c echo.Context, done string, err error) error {
	v := url.Values{}
	if err != nil {
		code := guard.ErrorCode(err)
		if status := httpx.Status(code); status >= 500 || status == 0 {
			s.log.ErrorContext(c.Request().Context(), "ops action failed", "path", c.Path(), "request_id", httpx.RequestID(c), "err", err)
		}
		v.Set("err", string(code))
	} else {
		v.Set("done", done)
	}
	return c.Redirect(http.StatusSeeOther, "/ops?"+v.Encode())
}

// timeLeft says how long a block lasts, for people.
func timeLeft(until, now time.Time) string {
	if until.IsZero() {
		return "until removed"
	}
	d := until.Sub(now).Round(time.Second)
	switch {
	case d <= 0:
		return "ending"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// chart is the inline SVG of sends and blocks per minute.
type chart struct {
	W, H, Left, Base      int
	Bars                  []chartBar
	Sends, Blocks, Peak   int64
	FirstLabel, LastLabel string
}

type chartBar struct {
	Class      string
	X, Y, W, H float64
	Title      string
}

// newChart lays out one pair of bars per minute: sends, then blocks.
func newChart(mins []ops.MinuteActivity) *chart {
	const (
		slot   = 12.0 // px per minute
		bar    = 5.0
		left   = 28
		top    = 8
		height = 120
	)
	ch := &chart{W: left + int(slot)*len(mins), H: top + height + 16, Left: left, Base: top + height}
	for _, m := range mins {
		ch.Sends += m.Sends
		ch.Blocks += m.Blocks
		ch.Peak = max(ch.Peak, m.Sends, m.Blocks)
	}
	if len(mins) > 0 {
		ch.FirstLabel = mins[0].Minute.UTC().Format("15:04")
		ch.LastLabel = mins[len(mins)-1].Minute.UTC().Format("15:04") + " UTC"
	}
	scale := float64(height) / float64(max(ch.Peak, 1))
	for i, m := range mins {
		x := float64(left) + float64(i)*slot + 1
		at := m.Minute.UTC().Format("15:04")
		for j, v := range []int64{m.Sends, m.Blocks} {
			if v == 0 {
				continue
			}
			h := max(float64(v)*scale, 1)
			class, what := "sends", "sent"
			if j == 1 {
				class, what = "blocks", "blocked"
			}
			ch.Bars = append(ch.Bars, chartBar{Class: class, X: x + float64(j)*bar, Y: float64(ch.Base) - h, W: bar, H: h,
				Title: fmt.Sprintf("%s: %d %s", at, v, what)})
		}
	}
	return ch
}
