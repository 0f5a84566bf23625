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

// The ops desk's emergency overrides (README.md, "Changing limits during an
// attack"): GET/POST /ops/overrides, DELETE /ops/overrides/{id}, and the
// page's section (templates/overrides.html) with its two forms.

// overrideItem is one override as the ops API shows it.
type overrideItem struct {
	ID      int64  `json:"id"`
	Kind    string `json:"kind"`
	Subject string `json:"subject,omitempty"`
	// Limit is the override's; FileLimit the policy file's for the same
	// rule (absent when the file has none); what applies is the lower.
	Limit            *int64    `json:"limit,omitempty"`
	FileLimit        *int64    `json:"file_limit,omitempty"`
	Reason           string    `json:"reason"`
	Author           string    `json:"author"`
	CreatedAt        time.Time `json:"created_at"`
	ExpiresAt        time.Time `json:"expires_at"`
	ExpiresInSeconds int64     `json:"expires_in_seconds"`
}

type overrideList struct {
	Overrides []overrideItem `json:"overrides"`
}

func toOverrideItem(o guard.Override, p guard.OTPPolicy, now time.Time) overrideItem {
	it := overrideItem{ID: o.ID, Kind: string(o.Kind), Subject: o.Subject, Reason: o.Reason, Author: o.Author,
		CreatedAt: o.CreatedAt.UTC(), ExpiresAt: o.ExpiresAt.UTC(),
		ExpiresInSeconds: max(0, int64((o.ExpiresAt.Sub(now)+time.Second-1)/time.Second))}
	if o.Kind != guard.OverrideCountryPause {
		l := o.Limit
		it.Limit = &l
	}
	if f, _, ok := guard.FileLimit(p, o); ok {
		it.FileLimit = &f
	}
	return it
}

// ListOverrides: GET /ops/overrides. The overrides in force, oldest first,
// with the time each has left.
func (s *Handlers) ListOverrides(c echo.Context) error {
	list, err := s.ops.Overrides(c.Request().Context())
	if err != nil {
		return err
	}
	now, p := s.ops.Now(), s.ops.FilePolicy()
	out := overrideList{Overrides: make([]overrideItem, 0, len(list))}
	for _, o := range list {
		out.Overrides = append(out.Overrides, toOverrideItem(o, p, now))
	}
	return c.JSON(http.StatusOK, out)
}

type addOverrideRequest struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Limit   int64  `json:"limit"`
	// ExpiresIn is in seconds: guard.DefaultOverrideFor when absent.
	ExpiresIn *int64 `json:"expires_in"`
	Reason    string `json:"reason"`
}

// maxOverrideSeconds bounds expires_in as the desk does.
const maxOverrideSeconds = int64(guard.MaxOverrideFor / time.Second)

// AddOverride: POST /ops/overrides. Tightens one rule of the policy file
// until it expires: 201 with the override; 422 override_looser when it
// would loosen the file; 400 naming the field for anything else wrong.
func (s *Handlers) AddOverride(c echo.Context) error {
	var req addOverrideRequest
	if err := httpx.DecodeJSON(c, &req); err != nil {
		return err
	}
	lasts := time.Duration(0)
	if req.ExpiresIn != nil {
		if *req.ExpiresIn < 1 || *req.ExpiresIn > maxOverrideSeconds {
			return s.fieldProblem(c, &guard.OverrideError{Field: "expires_in", Err: problem.Errorf(problem.CodeInvalidRequest,
				"expires_in: must be between 1 and %d seconds (7 days)", maxOverrideSeconds)})
		}
		lasts = time.Duration(*req.ExpiresIn) * time.Second
	}
	o := guard.Override{Kind: guard.OverrideKind(req.Kind), Subject: req.Subject, Limit: req.Limit, Reason: req.Reason}
	added, err := s.ops.AddOverride(c.Request().Context(), o, lasts, actorFrom(c))
	if err != nil {
		return s.fieldProblem(c, err)
	}
	return c.JSON(http.StatusCreated, toOverrideItem(added, s.ops.FilePolicy(), s.ops.Now()))
}

// RemoveOverride: DELETE /ops/overrides/{id}. The file's value applies
// again; 404 when there is no such override.
func (s *Handlers) RemoveOverride(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.Errorf(problem.CodeInvalidRequest, "id must be a positive integer")
	}
	if err := s.ops.RemoveOverride(c.Request().Context(), id, actorFrom(c)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// fieldProblem answers a refusal that names a field (guard.OverrideError)
// with problem details carrying it as the extension member "field"; any
// other error goes to the error handler.
func (s *Handlers) fieldProblem(c echo.Context, err error) error {
	var fe *guard.OverrideError
	if !errors.As(err, &fe) {
		return err
	}
	status := httpx.Status(fe.Err.Code)
	body := struct {
		httpx.Problem
		Field string `json:"field"`
	}{Problem: httpx.Problem{Type: "urn:otpguard:problem:" + string(fe.Err.Code), Title: http.StatusText(status), Status: status,
		Detail: fe.Err.Message, Code: string(fe.Err.Code), RequestID: httpx.RequestID(c)}, Field: fe.Field}
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	c.Response().WriteHeader(status)
	return httpx.WriteJSON(c.Response(), body)
}

// The page's section.

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
func (s *Handlers) overridesFor(c echo.Context, csrf string, dbDown bool) overridesSection {
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
		}
		if o.Kind != guard.OverrideCountryPause {
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
	case problem.CodeInvalidRequest:
		switch field {
		case "kind":
			return "Kind: choose what to tighten."
		case "subject":
			return "Country or prefix: a country is an ISO code such as NG; a prefix is + and 1 to 15 digits; budgets take none."
		case "limit":
			return "Limit: a whole number of sends, at least 1 (leave it empty to pause a country)."
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
func (s *Handlers) FormOverride(c echo.Context) error {
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
// removal: "pausing NG", "limiting GB to 5", "lowering the hourly budget
// to 2".
func overrideName(o guard.Override) string {
	n := strconv.FormatInt(o.Limit, 10)
	switch o.Kind {
	case guard.OverrideCountryPause:
		return "pausing " + o.Subject
	case guard.OverrideCountryLimit, guard.OverridePrefixLimit:
		return "limiting " + o.Subject + " to " + n
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
func (s *Handlers) FormRemoveOverride(c echo.Context) error {
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
func (s *Handlers) backToOverrides(c echo.Context, f overrideForm, err error) error {
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
