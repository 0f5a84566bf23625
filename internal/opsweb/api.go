package opsweb

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// blockedItem is one row of GET /ops/blocked.
type blockedItem struct {
	Phone       string     `json:"phone"`
	Country     string     `json:"country,omitempty"`
	Reason      string     `json:"reason"`
	Count       int64      `json:"count,omitempty"`
	Since       time.Time  `json:"since"`
	Until       *time.Time `json:"until,omitempty"`
	SecondsLeft *int64     `json:"seconds_left,omitempty"`
	DenyID      int64      `json:"deny_id,omitempty"`
	Note        string     `json:"note,omitempty"`
	Author      string     `json:"author,omitempty"`
}

type blockedResponse struct {
	Blocks []blockedItem `json:"blocks"`
	Total  int           `json:"total"`
	Limit  int           `json:"limit"`
	Offset int           `json:"offset"`
}

func toBlockedItem(b ops.BlockedNumber, now time.Time) blockedItem {
	it := blockedItem{Phone: b.Phone, Country: b.Country, Reason: string(b.Reason), Count: b.Count, Since: b.Since}
	if !b.Until.IsZero() {
		until := b.Until
		left := int64(max(0, until.Sub(now).Round(time.Second)/time.Second))
		it.Until, it.SecondsLeft = &until, &left
	}
	if b.Deny != nil {
		it.DenyID, it.Note, it.Author = b.Deny.ID, b.Deny.Reason, b.Deny.Author
	}
	return it
}

// ListBlocked: GET /ops/blocked. The numbers refused now and why, most
// recent first, deny-list entries included.
func (s *API) ListBlocked(c echo.Context) error {
	q := c.QueryParams()
	limit, err := intParam(q, "limit")
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset")
	if err != nil {
		return err
	}
	f := ops.BlockFilter{Phone: q.Get("phone"), Country: q.Get("country"), Limit: int(limit), Offset: int(offset)}
	page, err := s.ops.Blocked(c.Request().Context(), f)
	if err != nil {
		return err
	}
	now := s.ops.Now()
	res := blockedResponse{Blocks: make([]blockedItem, 0, len(page.Blocks)), Total: page.Total, Limit: f.Limit, Offset: f.Offset}
	if res.Limit == 0 {
		res.Limit = ops.DefaultBlockLimit
	}
	for _, b := range page.Blocks {
		res.Blocks = append(res.Blocks, toBlockedItem(b, now))
	}
	return c.JSON(http.StatusOK, res)
}

type unblockResponse struct {
	Status   string     `json:"status"`
	Phone    string     `json:"phone"`
	DeniedBy *denyEntry `json:"denied_by,omitempty"`
}

// Unblock: DELETE /ops/blocked/{phone}. Clears the number's send counters,
// cooldown and code (and so a verify lock-out); audited with the actor.
func (s *API) Unblock(c echo.Context) error {
	raw, err := url.PathUnescape(c.Param("phone"))
	if err != nil {
		return problem.Errorf(problem.CodeInvalidPhone, "phone is not a valid path segment")
	}
	res, err := s.ops.Unblock(c.Request().Context(), raw, actorFrom(c), serviceSIDs(s.services)...)
	if err != nil {
		return err
	}
	out := unblockResponse{Status: "unblocked", Phone: res.Phone.E164}
	if res.DeniedBy != nil {
		d := toDenyEntry(*res.DeniedBy)
		out.DeniedBy = &d
	}
	return c.JSON(http.StatusOK, out)
}

// denyEntry is a deny-list entry as the ops API shows it.
type denyEntry struct {
	ID        int64      `json:"id"`
	Pattern   string     `json:"pattern"`
	Reason    string     `json:"reason"`
	Author    string     `json:"author"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func toDenyEntry(e guard.DenyEntry) denyEntry {
	return denyEntry{ID: e.ID, Pattern: e.Pattern, Reason: e.Reason, Author: e.Author, CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt}
}

type denyListResponse struct {
	Entries []denyEntry `json:"entries"`
}

// ListDeny: GET /ops/denylist. The live deny-list, oldest first.
func (s *API) ListDeny(c echo.Context) error {
	entries, err := s.ops.DenyEntries(c.Request().Context())
	if err != nil {
		return err
	}
	res := denyListResponse{Entries: make([]denyEntry, 0, len(entries))}
	for _, e := range entries {
		res.Entries = append(res.Entries, toDenyEntry(e))
	}
	return c.JSON(http.StatusOK, res)
}

type addDenyRequest struct {
	Pattern   string     `json:"pattern"`
	Reason    string     `json:"reason"`
	ExpiresAt *time.Time `json:"expires_at"`
	ExpiresIn *int64     `json:"expires_in"` // seconds
}

// AddDeny: POST /ops/denylist. Deny-lists a number or a prefix; every
// instance enforces it within its refresh interval (this one at once).
func (s *API) AddDeny(c echo.Context) error {
	var req addDenyRequest
	if err := httpx.DecodeJSON(c, &req); err != nil {
		return err
	}
	e := guard.DenyEntry{Pattern: req.Pattern, Reason: req.Reason, ExpiresAt: req.ExpiresAt}
	switch {
	case req.ExpiresAt != nil && req.ExpiresIn != nil:
		return problem.Errorf(problem.CodeInvalidRequest, "send expires_at or expires_in, not both")
	case req.ExpiresIn != nil:
		if *req.ExpiresIn < 1 || *req.ExpiresIn > maxDenySeconds {
			return problem.Errorf(problem.CodeInvalidRequest, "expires_in must be between 1 and %d seconds", maxDenySeconds)
		}
		t := s.ops.Now().Add(time.Duration(*req.ExpiresIn) * time.Second)
		e.ExpiresAt = &t
	}
	added, err := s.ops.AddDeny(c.Request().Context(), e, actorFrom(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, toDenyEntry(added))
}

// maxDenySeconds bounds expires_in as the desk bounds expires_at.
const maxDenySeconds = int64(ops.MaxDenyFor / time.Second)

// RemoveDeny: DELETE /ops/denylist/{id}. Removes an entry; 404 when there
// is none.
func (s *API) RemoveDeny(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.Errorf(problem.CodeInvalidRequest, "id must be a positive integer")
	}
	if err := s.ops.RemoveDeny(c.Request().Context(), id, actorFrom(c)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// eventItem is one audit event as the ops API shows it.
type eventItem struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Action  string    `json:"action"`
	Outcome string    `json:"outcome"`
	Phone   string    `json:"phone"`
	Country string    `json:"country"`
	IP      string    `json:"ip"`
	Actor   string    `json:"actor"`
	Detail  string    `json:"detail"`
	// TraceID is the trace of the request behind the event, when traced.
	TraceID string `json:"trace_id,omitempty"`
	// RequestID: the X-Request-Id of the request behind the event.
	RequestID string `json:"request_id"`
	// Service is the Verify service SID the call acted for; absent for
	// the default service.
	Service string `json:"service,omitempty"`
}

type eventsResponse struct {
	Events []eventItem `json:"events"`
	// NextBeforeID is the before_id of the next (older) page, when the
	// page is full.
	NextBeforeID int64 `json:"next_before_id,omitempty"`
}

// ListEvents: GET /ops/events. The audit trail, newest first, filtered by
// phone, action, request ID, Verify service and time, paged by before_id.
func (s *API) ListEvents(c echo.Context) error {
	f, err := eventFilter(c.QueryParams())
	if err != nil {
		return err
	}
	events, err := s.ops.Events(c.Request().Context(), f)
	if err != nil {
		return err
	}
	res := eventsResponse{Events: make([]eventItem, 0, len(events))}
	for _, e := range events {
		res.Events = append(res.Events, eventItem{ID: e.ID, At: e.At, Action: e.Action, Outcome: e.Outcome,
			Phone: e.Phone, Country: e.Country, IP: e.IP, Actor: e.Actor, Detail: e.Detail, TraceID: e.TraceID, RequestID: e.RequestID,
			Service: e.Service})
	}
	limit := f.Limit
	if limit == 0 {
		limit = ops.DefaultEventLimit
	}
	if len(events) == limit {
		res.NextBeforeID = events[len(events)-1].ID
	}
	return c.JSON(http.StatusOK, res)
}

func eventFilter(q url.Values) (ops.EventFilter, error) {
	var f ops.EventFilter
	if p := q.Get("phone"); p != "" {
		phone, err := guard.ParsePhone(p, "")
		if err != nil {
			return f, err
		}
		f.Phone = phone.E164
	}
	f.Action = q.Get("action")
	if len(f.Action) > 64 || !ops.PlainText(f.Action) {
		return f, problem.Errorf(problem.CodeInvalidRequest, "action must be an action name such as otp.send")
	}
	f.RequestID = q.Get("request_id")
	if f.RequestID != "" && !httpx.PlainID(f.RequestID) {
		return f, problem.Errorf(problem.CodeInvalidRequest, "request_id must be a request ID as X-Request-Id carries it")
	}
	f.Service = q.Get("service")
	if f.Service == DefaultServiceParam {
		f.Service, f.DefaultService = "", true
	}
	if f.Service != "" && !guard.ValidSID(f.Service, "VA") {
		return f, problem.Errorf(problem.CodeInvalidRequest, "service must be a Verify service SID (VA and 32 hex digits) or default")
	}
	var err error
	if f.Since, err = timeParam(q, "since"); err != nil {
		return f, err
	}
	if f.Until, err = timeParam(q, "until"); err != nil {
		return f, err
	}
	limit, err := intParam(q, "limit")
	if err != nil {
		return f, err
	}
	f.Limit = int(min(limit, ops.MaxEventLimit+1)) // the desk refuses above the maximum
	if f.BeforeID, err = intParam(q, "before_id"); err != nil {
		return f, err
	}
	return f, nil
}

// intParam reads a non-negative integer query parameter; 0 when absent.
func intParam(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, problem.Errorf(problem.CodeInvalidRequest, "%s must be a non-negative integer", name)
	}
	return n, nil
}

// timeParam reads an RFC 3339 time query parameter; zero when absent.
func timeParam(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, problem.Errorf(problem.CodeInvalidRequest, "%s must be an RFC 3339 time, like 2026-03-01T12:00:00Z", name)
	}
	return t, nil
}
