package opsweb

import (
	"fmt"
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
	"github.com/otpguard/otpguard/internal/problem"
)

// doneMessages are the page's confirmations, by the done parameter.
var doneMessages = map[string]string{
	"unblocked":      "Unblocked: the number may receive a code again.",
	"denied":         "Added to the deny-list. Every instance enforces it within seconds.",
	"undenied":       "Removed from the deny-list.",
	"risk_cleared":   "Risk score cleared: the number's next refused send asks the network again.",
	"number_trusted": "Trusted: the number is marked as if it had just verified a code.",
}

// problemMessage is what the page says of a refusal: fixed text per code,
// so that no query parameter can put words on the page.
func problemMessage(code problem.Code) string {
	switch code {
	case problem.CodeInvalidPhone:
		return "that is not a valid phone number."
	case problem.CodeInvalidRequest:
		return "check the form: a pattern is + and 1 to 15 digits, an expiry a duration like 30m or 24h."
	case problem.CodeNotFound:
		return "that entry no longer exists."
	case problem.CodeStoreUnavailable:
		return "the store is unavailable; try again shortly."
	case problem.CodeDatabaseUnavailable:
		return "the ops database is unreachable; try again shortly."
	case problem.CodeForbidden:
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

func (s *Pages) confirm(c echo.Context, action, message, button string, fields map[string]string) error {
	p := confirmPage{Action: action, Message: message, Button: button, Fields: fields}
	if sess, ok := c.Get(ctxSession).(string); ok {
		p.CSRF = s.sessions.csrf(sess)
	}
	return render(c, http.StatusOK, "confirm.html", p)
}

func confirmed(c echo.Context) bool { return c.Request().PostFormValue("confirmed") == "1" }

// FormUnblock: POST /ops/actions/unblock. The page's unblock button; asks
// for a confirmation naming the number first (confirmed=1 skips it).
func (s *Pages) FormUnblock(c echo.Context) error {
	phone := strings.TrimSpace(c.Request().PostFormValue("phone"))
	if !confirmed(c) {
		return s.confirm(c, "/ops/actions/unblock", "Unblock "+phone+"? Its limits are cleared and it may receive a code at once.",
			"Unblock "+phone, map[string]string{"phone": phone})
	}
	_, err := s.ops.Unblock(c.Request().Context(), phone, actorFrom(c), serviceSIDs(s.services)...)
	return s.backToPage(c, "unblocked", err)
}

// FormDeny: POST /ops/actions/deny. The page's deny-list form: pattern,
// reason and expires_in (a duration such as 30m or 24h; empty for never).
// A field it refuses is named and the page keeps what was typed; a pattern
// that covers whole countries (+1) needs confirm_country=yes.
func (s *Pages) FormDeny(c echo.Context) error {
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
		return render(c, http.StatusBadRequest, "ops.html", p)
	}
	_, err := s.ops.AddDeny(c.Request().Context(), e, actorFrom(c))
	return s.backToPage(c, "denied", err)
}

// FormUndeny: POST /ops/actions/undeny. The page's deny-list remove
// button; asks for a confirmation naming the pattern first.
func (s *Pages) FormUndeny(c echo.Context) error {
	raw := c.Request().PostFormValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return s.backToPage(c, "", problem.Errorf(problem.CodeInvalidRequest, "id must be a positive integer"))
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
func (s *Pages) backToPage(c echo.Context, done string, err error) error {
	v := url.Values{}
	if err != nil {
		code := problem.CodeOf(err)
		if status := httpx.Status(code); status >= 500 || status == 0 {
			s.log.ErrorContext(c.Request().Context(), "ops action failed", "path", c.Path(), "request_id", httpx.RequestID(c), "err", err)
		}
		v.Set("err", string(code))
	} else {
		v.Set("done", done)
	}
	// An action taken from the number search goes back to its answer.
	if q := strings.TrimSpace(c.Request().PostFormValue("back_q")); q != "" && len(q) <= maxSearch {
		v.Set("q", q)
		return c.Redirect(http.StatusSeeOther, "/ops?"+v.Encode()+"#search")
	}
	return c.Redirect(http.StatusSeeOther, "/ops?"+v.Encode())
}
