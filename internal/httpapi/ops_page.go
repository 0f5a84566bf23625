package httpapi

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

//go:embed ops_templates/*.html
var opsTemplateFS embed.FS

// opsTemplates are parsed once; they are never changed afterwards.
var opsTemplates = template.Must(template.ParseFS(opsTemplateFS, "ops_templates/*.html"))

// opsPageCSP allows the page nothing but itself: inline styles and inline
// SVG, no scripts, no external assets, forms only to itself, no framing.
const opsPageCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Sizes of the page's lists.
const (
	pageBlocks = 100
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

	Blocked      []pageBlock
	BlockedTotal int
	BlockedErr   string
	Deny         []denyEntry
	DenyErr      string
	Events       []guard.Event
	EventsErr    string
	Chart        *chart
	ChartErr     string
	// Overrides is the emergency overrides' section (ops_overrides.go).
	Overrides overridesSection
	// DatabaseDown shows the banner: the ops database did not answer (or
	// is not connected yet), so the parts it holds are not shown.
	DatabaseDown bool
}

type pageBlock struct {
	blockedItem
	Left string
}

// opsPage: GET /ops. The ops page: blocked numbers, the deny-list, recent
// events and a chart of the last hour. A part whose store fails shows the
// failure; the rest still renders.
func (s *Server) opsPage(c echo.Context) error {
	ctx := c.Request().Context()
	q := c.QueryParams()
	p := opsPage{Actor: actorFrom(c), Phone: q.Get("phone"), Country: q.Get("country")}
	if sess, ok := c.Get(ctxSession).(string); ok {
		p.CSRF = s.sessions.csrf(sess)
	}
	p.Flash = doneMessages[q.Get("done")]
	if code := q.Get("err"); code != "" {
		p.Problem = problemMessage(guard.Code(code))
	}
	now := s.ops.Now()

	page, err := s.ops.Blocked(ctx, ops.BlockFilter{Phone: p.Phone, Country: p.Country, Limit: pageBlocks})
	if err != nil {
		p.BlockedErr = s.partFailed(c, "blocked numbers", err)
	}
	p.BlockedTotal = page.Total
	for _, b := range page.Blocks {
		p.Blocked = append(p.Blocked, pageBlock{blockedItem: toBlockedItem(b, now), Left: timeLeft(b.Until, now)})
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
			p.Deny = append(p.Deny, toDenyEntry(e))
		}
		return err
	})
	p.EventsErr = dbPart("events", func() (err error) {
		p.Events, err = s.ops.Events(ctx, ops.EventFilter{Limit: pageEvents})
		return err
	})
	p.ChartErr = dbPart("the chart", func() error {
		act, err := s.ops.Activity(ctx, chartMins)
		if err == nil {
			p.Chart = newChart(act)
		}
		return err
	})
	p.Overrides = s.overridesFor(c, p.CSRF, p.DatabaseDown)
	return s.render(c, http.StatusOK, "ops.html", p)
}

// partFailed logs why a part of the page failed and says so, safely.
func (s *Server) partFailed(c echo.Context, what string, err error) string {
	code := guard.ErrorCode(err)
	if status := statusOf[code]; status >= 500 || status == 0 {
		s.log.ErrorContext(c.Request().Context(), "ops page: loading "+what+" failed", "request_id", requestID(c), "err", err)
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

// formUnblock: POST /ops/actions/unblock. The page's unblock button.
func (s *Server) formUnblock(c echo.Context) error {
	_, err := s.ops.Unblock(c.Request().Context(), c.Request().PostFormValue("phone"), actorFrom(c))
	return s.backToPage(c, "unblocked", err)
}

// formDeny: POST /ops/actions/deny. The page's deny-list form: pattern,
// reason and expires_in (a duration such as 30m or 24h; empty for never).
func (s *Server) formDeny(c echo.Context) error {
	form := c.Request().PostFormValue
	e := guard.DenyEntry{Pattern: strings.TrimSpace(form("pattern")), Reason: strings.TrimSpace(form("reason"))}
	if v := strings.TrimSpace(form("expires_in")); v != "" && v != "never" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > ops.MaxDenyFor {
			return s.backToPage(c, "", guard.Errorf(guard.CodeInvalidRequest, "expires_in must be a duration such as 30m or 24h, of at most 10 years"))
		}
		t := s.ops.Now().Add(d)
		e.ExpiresAt = &t
	}
	_, err := s.ops.AddDeny(c.Request().Context(), e, actorFrom(c))
	return s.backToPage(c, "denied", err)
}

// formUndeny: POST /ops/actions/undeny. The page's deny-list remove button.
func (s *Server) formUndeny(c echo.Context) error {
	id, err := strconv.ParseInt(c.Request().PostFormValue("id"), 10, 64)
	if err != nil || id < 1 {
		return s.backToPage(c, "", guard.Errorf(guard.CodeInvalidRequest, "id must be a positive integer"))
	}
	return s.backToPage(c, "undenied", s.ops.RemoveDeny(c.Request().Context(), id, actorFrom(c)))
}

// backToPage answers a form with 303 to the page, which says what happened.
func (s *Server) backToPage(c echo.Context, done string, err error) error {
	v := url.Values{}
	if err != nil {
		code := guard.ErrorCode(err)
		if status := statusOf[code]; status >= 500 || status == 0 {
			s.log.ErrorContext(c.Request().Context(), "ops action failed", "path", c.Path(), "request_id", requestID(c), "err", err)
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
