package opsweb

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// overridesSection is what templates/overrides.html shows.
type overridesSection struct {
	CSRF   string
	Kinds  []overrideKindOption
	Active []overrideRow
	Err    string // the section could not be loaded
	// A refused form comes back with its values and the field at fault.
	Form    overrideForm
	Field   string
	Problem string
	Flash   string
}

type overrideKindOption struct {
	Value, Label string
}

type overrideRow struct {
	ID                              int64
	Kind, Subject, Limit, FileLimit string
	Reason, Author, Left            string
	Until                           time.Time
	// Confirm is the question its Remove button asks (overrideConfirm).
	Confirm string
}

type overrideForm struct {
	Kind, Subject, Limit, ExpiresIn, Reason string
}

var overrideKindLabels = map[guard.OverrideKind]string{
	guard.OverrideCountryLimit: "Tighten a country's limit",
	guard.OverrideCountryPause: "Pause a country",
	guard.OverrideCarrierLimit: "Limit a carrier of a country",
	guard.OverrideCarrierPause: "Pause a carrier of a country",
	guard.OverridePrefixLimit:  "Limit a prefix",
	guard.OverrideBudgetHour:   "Lower the hourly budget",
	guard.OverrideBudgetDay:    "Lower the daily budget",
}

// The query parameters a refused or done override form comes back with.
const (
	qOvDone  = "ov_done"
	qOvCode  = "ov_err"
	qOvField = "ov_field"
)

var overrideFormFields = []string{"kind", "subject", "limit", "expires_in", "reason"}

// overridesFor builds the page's section: the overrides in force and the
// form, refilled with what was typed when it was refused. When the page
// already found the database down it is not asked again (the page answers
// within one database timeout).
func (s *Pages) overridesFor(c echo.Context, csrf string, dbDown bool) overridesSection {
	q := c.QueryParams()
	sec := overridesSection{CSRF: csrf, Form: overrideForm{
		Kind: q.Get("ov_kind"), Subject: q.Get("ov_subject"), Limit: q.Get("ov_limit"),
		ExpiresIn: q.Get("ov_expires_in"), Reason: q.Get("ov_reason")}}
	if sec.Form.ExpiresIn == "" {
		sec.Form.ExpiresIn = "24h"
	}
	for _, k := range guard.OverrideKinds {
		sec.Kinds = append(sec.Kinds, overrideKindOption{Value: string(k), Label: overrideKindLabels[k]})
	}
	switch q.Get(qOvDone) {
	case "added":
		sec.Flash = "Override in force here now, and on every instance within the deny-list refresh interval."
	case "removed":
		sec.Flash = "Override removed: the policy file's value applies again."
	}
	if code := problem.Code(q.Get(qOvCode)); code != "" {
		sec.Field = fieldName(q.Get(qOvField))
		sec.Problem = overrideProblem(code, sec.Field, s.ops.FilePolicy(), sec.Form)
	}
	if dbDown {
		sec.Err = "Could not load the overrides: " + problemMessage(problem.CodeDatabaseUnavailable) +
			" Those already loaded stay in force until they expire."
		return sec
	}
	list, err := s.ops.Overrides(c.Request().Context())
	if err != nil {
		sec.Err = s.partFailed(c, "the overrides", err)
		return sec
	}
	now, p := s.ops.Now(), s.ops.FilePolicy()
	for _, o := range list {
		r := overrideRow{ID: o.ID, Kind: overrideKindLabels[o.Kind], Subject: o.Subject, Reason: o.Reason, Author: o.Author,
			Left: timeLeft(o.ExpiresAt, now), Until: o.ExpiresAt.UTC(), Limit: "paused", FileLimit: "none", Confirm: overrideConfirm(o)}
		if o.Subject == "" {
			r.Subject = "all sends"
		} else {
			r.Subject = guard.OverrideSubjectName(o) // a carrier: "NG / MTN"
		}
		if o.Kind != guard.OverrideCountryPause && o.Kind != guard.OverrideCarrierPause {
			r.Limit = strconv.FormatInt(o.Limit, 10)
		}
		if f, _, ok := guard.FileLimit(p, o); ok {
			r.FileLimit = strconv.FormatInt(f, 10)
		}
		sec.Active = append(sec.Active, r)
	}
	return sec
}

// fieldName keeps only the form's own field names: nothing a query says is
// put on the page as is.
func fieldName(f string) string {
	for _, name := range overrideFormFields {
		if f == name {
			return name
		}
	}
	return ""
}

// overrideProblem is the section's message for a refused form: fixed text
// per field, with the file's limit for a loosening one.
func overrideProblem(code problem.Code, field string, p guard.OTPPolicy, f overrideForm) string {
	switch code {
	case problem.CodeOverrideLooser:
		limit, _ := strconv.ParseInt(f.Limit, 10, 64)
		o, err := guard.NormalizeOverride(guard.Override{Kind: guard.OverrideKind(f.Kind), Subject: f.Subject, Limit: limit})
		if file, name, ok := guard.FileLimit(p, o); err == nil && ok {
			return "Limit: an override can only tighten the policy file; " + name + " is " + strconv.FormatInt(file, 10) + ", so give at most that."
		}
		return "Limit: an override can only tighten the policy file."
	case problem.CodeUnknownCountry:
		return "Country, carrier or prefix: a carrier's country is an ISO code such as NG, then / and the carrier (NG / MTN)."
	case problem.CodeInvalidRequest:
		switch field {
		case "kind":
			return "Kind: choose what to tighten."
		case "subject":
			return "Country, carrier or prefix: a country is an ISO code such as NG; a carrier is its country, / and its name (NG / MTN); a prefix is + and 1 to 15 digits; budgets take none."
		case "limit":
			return "Limit: a whole number of sends, at least 1 (leave it empty to pause a country or a carrier)."
		case "expires_in":
			return "Lasts: a duration such as 30m, 24h or 72h, of at most 7 days."
		case "reason":
			return "Reason: say why (required), in at most 500 characters."
		}
	}
	return problemMessage(code)
}

// FormOverride: POST /ops/actions/override. The page's override form: kind,
// subject, limit, expires_in (a duration such as 24h) and reason.
func (s *Pages) FormOverride(c echo.Context) error {
	form := c.Request().PostFormValue
	f := overrideForm{Kind: strings.TrimSpace(form("kind")), Subject: strings.TrimSpace(form("subject")),
		Limit: strings.TrimSpace(form("limit")), ExpiresIn: strings.TrimSpace(form("expires_in")), Reason: strings.TrimSpace(form("reason"))}
	back := func(err error) error { return s.backToOverrides(c, f, err) }
	o := guard.Override{Kind: guard.OverrideKind(f.Kind), Subject: f.Subject, Reason: f.Reason}
	if f.Limit != "" {
		n, err := strconv.ParseInt(f.Limit, 10, 64)
		if err != nil {
			return back(&guard.OverrideError{Field: "limit", Err: problem.Errorf(problem.CodeInvalidRequest, "limit: not a whole number")})
		}
		o.Limit = n
	}
	var lasts time.Duration
	if f.ExpiresIn != "" {
		d, err := time.ParseDuration(f.ExpiresIn)
		if err != nil || d < time.Second || d > guard.MaxOverrideFor {
			return back(&guard.OverrideError{Field: "expires_in", Err: problem.Errorf(problem.CodeInvalidRequest, "expires_in: bad duration")})
		}
		lasts = d
	}
	_, err := s.ops.AddOverride(c.Request().Context(), o, lasts, actorFrom(c))
	return back(err)
}

// overrideName says what an override does, for the question before its
// removal: "pausing NG", "pausing NG / MTN", "limiting GB to 5", "lowering
// the hourly budget to 2".
func overrideName(o guard.Override) string {
	n := strconv.FormatInt(o.Limit, 10)
	switch o.Kind {
	case guard.OverrideCountryPause, guard.OverrideCarrierPause:
		return "pausing " + guard.OverrideSubjectName(o)
	case guard.OverrideCountryLimit, guard.OverridePrefixLimit, guard.OverrideCarrierLimit:
		return "limiting " + guard.OverrideSubjectName(o) + " to " + n
	case guard.OverrideBudgetHour:
		return "lowering the hourly budget to " + n
	case guard.OverrideBudgetDay:
		return "lowering the daily budget to " + n
	}
	return strconv.FormatInt(o.ID, 10)
}

// overrideConfirm is the question before removing o: the page's script
// asks it, and without JavaScript the confirmation page does.
func overrideConfirm(o guard.Override) string {
	return "Remove the override " + overrideName(o) + "? The policy file's value applies again at once."
}

// FormRemoveOverride: POST /ops/actions/unoverride. The page's remove
// button; asks for a confirmation naming the override first (confirmed=1
// skips it).
func (s *Pages) FormRemoveOverride(c echo.Context) error {
	raw := c.Request().PostFormValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return s.backToPage(c, "", problem.Errorf(problem.CodeInvalidRequest, "id must be a positive integer"))
	}
	if !confirmed(c) {
		question := "Remove override " + raw + "? The policy file's value applies again at once."
		if list, err := s.ops.Overrides(c.Request().Context()); err == nil {
			for _, o := range list {
				if o.ID == id {
					question = overrideConfirm(o)
				}
			}
		}
		return s.confirm(c, "/ops/actions/unoverride", question, "Remove the override", map[string]string{"id": raw})
	}
	if err := s.ops.RemoveOverride(c.Request().Context(), id, actorFrom(c)); err != nil {
		return s.backToPage(c, "", err)
	}
	return c.Redirect(http.StatusSeeOther, "/ops?"+qOvDone+"=removed#overrides")
}

// backToOverrides answers the override form with 303 to the page: done, or
// refused with the field at fault and what was typed, so nothing is lost.
func (s *Pages) backToOverrides(c echo.Context, f overrideForm, err error) error {
	v := url.Values{}
	if err == nil {
		v.Set(qOvDone, "added")
		return c.Redirect(http.StatusSeeOther, "/ops?"+v.Encode()+"#overrides")
	}
	code := problem.CodeOf(err)
	if status := httpx.Status(code); status >= 500 || status == 0 {
		s.log.ErrorContext(c.Request().Context(), "ops action failed", "path", c.Path(), "request_id", httpx.RequestID(c), "err", err)
	}
	v.Set(qOvCode, string(code))
	var fe *guard.OverrideError
	if errors.As(err, &fe) {
		v.Set(qOvField, fe.Field)
	}
	v.Set("ov_kind", f.Kind)
	v.Set("ov_subject", f.Subject)
	v.Set("ov_limit", f.Limit)
	v.Set("ov_expires_in", f.ExpiresIn)
	v.Set("ov_reason", f.Reason)
	return c.Redirect(http.StatusSeeOther, "/ops?"+v.Encode()+"#overrides")
}
