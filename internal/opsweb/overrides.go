package opsweb

import (
	"errors"
	"net/http"
	"strconv"
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
	// SubjectName is a carrier's subject as people read it ("NG / MTN").
	SubjectName string `json:"subject_name,omitempty"`
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
	if o.Kind == guard.OverrideCarrierLimit || o.Kind == guard.OverrideCarrierPause {
		it.SubjectName = guard.OverrideSubjectName(o)
	}
	if o.Kind != guard.OverrideCountryPause && o.Kind != guard.OverrideCarrierPause {
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
func (s *API) ListOverrides(c echo.Context) error {
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
// would loosen the file; 422 unknown_country for a carrier of no country;
// 400 naming the field for anything else wrong.
func (s *API) AddOverride(c echo.Context) error {
	var req addOverrideRequest
	if err := httpx.DecodeJSON(c, &req); err != nil {
		return err
	}
	lasts := time.Duration(0)
	if req.ExpiresIn != nil {
		if *req.ExpiresIn < 1 || *req.ExpiresIn > maxOverrideSeconds {
			return fieldProblem(c, &guard.OverrideError{Field: "expires_in", Err: problem.Errorf(problem.CodeInvalidRequest,
				"expires_in: must be between 1 and %d seconds (7 days)", maxOverrideSeconds)})
		}
		lasts = time.Duration(*req.ExpiresIn) * time.Second
	}
	o := guard.Override{Kind: guard.OverrideKind(req.Kind), Subject: req.Subject, Limit: req.Limit, Reason: req.Reason}
	added, err := s.ops.AddOverride(c.Request().Context(), o, lasts, actorFrom(c))
	if err != nil {
		return fieldProblem(c, err)
	}
	return c.JSON(http.StatusCreated, toOverrideItem(added, s.ops.FilePolicy(), s.ops.Now()))
}

// RemoveOverride: DELETE /ops/overrides/{id}. The file's value applies
// again; 404 when there is no such override.
func (s *API) RemoveOverride(c echo.Context) error {
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
func fieldProblem(c echo.Context, err error) error {
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
