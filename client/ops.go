package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The ops JSON API (/ops/...): every call needs WithOpsKey.

// Status is GET /ops/status: the store, the breaker, N, the policies in
// fallback and the ops database as one instance sees them.
type Status struct {
	Status           string            `json:"status"` // "ok" or "degraded"
	Redis            string            `json:"redis"`  // "up" or "down"
	RedisSince       *time.Time        `json:"redis_since,omitempty"`
	Breaker          string            `json:"breaker"`
	Nodes            []NodeBreaker     `json:"nodes,omitempty"` // Redis Cluster only: each master's breaker
	Instances        int               `json:"instances"`
	InstancesFrom    string            `json:"instances_from"`
	LastStoreFailure *time.Time        `json:"last_store_failure,omitempty"`
	LocalCounters    int               `json:"local_counters"`
	InFallback       []string          `json:"in_fallback"`
	Policies         []PolicyStatus    `json:"policies"`
	Database         *Database         `json:"database,omitempty"`
	PolicyFile       *PolicyFile       `json:"policy_file,omitempty"`
	Overrides        *OverridesInForce `json:"overrides,omitempty"`
}

// NodeBreaker is one Redis Cluster master's breaker, in Status: Node is
// its host:port, or "*" for calls whose keys span masters.
type NodeBreaker struct {
	Node    string `json:"node"`
	Breaker string `json:"breaker"` // closed, half-open or open
}

// PolicyFile is the policy file in force on the instance, in Status.
type PolicyFile struct {
	Path     string     `json:"path"` // empty: the built-in defaults
	LoadedAt *time.Time `json:"loaded_at,omitempty"`
	// LastReload is the last reload (SIGHUP) since start-up; nil when none.
	LastReload *struct {
		At     time.Time `json:"at"`
		Result string    `json:"result"`          // "ok" or "error" (the file was refused, the policy kept)
		Error  string    `json:"error,omitempty"` // why, naming the field
	} `json:"last_reload,omitempty"`
}

// OverridesInForce counts the emergency overrides in force on the
// instance, in Status.
type OverridesInForce struct {
	Active   int        `json:"active"`
	LoadedAt *time.Time `json:"loaded_at,omitempty"` // when last loaded from the ops database
}

// PolicyStatus is one policy's fallback state in Status.
type PolicyStatus struct {
	Policy            string     `json:"policy"`
	OnStoreError      string     `json:"on_store_error"`
	InFallback        bool       `json:"in_fallback"`
	Since             *time.Time `json:"since,omitempty"`
	FallbackDecisions int64      `json:"fallback_decisions"`
}

// Database is the ops database's state in Status.
type Database struct {
	State          string     `json:"state"` // "up", "down" or "connecting"
	Since          *time.Time `json:"since,omitempty"`
	DenyListLoaded bool       `json:"deny_list_loaded"`
	DenyEntries    int        `json:"deny_entries"`
}

// Status reads GET /ops/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	return opsGet[Status](ctx, c, "/ops/status", nil)
}

// BlockFilter narrows GET /ops/blocked; zero fields are not sent.
type BlockFilter struct {
	Phone   string // a number, in any format
	Country string // ISO 3166-1 alpha-2
	Limit   int    // page size (otpguard's default when 0)
	Offset  int
}

// Block is one number refused now, and why.
type Block struct {
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

// Blocks is one page of GET /ops/blocked.
type Blocks struct {
	Blocks []Block `json:"blocks"`
	Total  int     `json:"total"`
	Limit  int     `json:"limit"`
	Offset int     `json:"offset"`
}

// Blocked lists the numbers refused now, most recent first: GET
// /ops/blocked.
func (c *Client) Blocked(ctx context.Context, f BlockFilter) (*Blocks, error) {
	q := url.Values{}
	setStr(q, "phone", f.Phone)
	setStr(q, "country", f.Country)
	setInt(q, "limit", int64(f.Limit))
	setInt(q, "offset", int64(f.Offset))
	return opsGet[Blocks](ctx, c, "/ops/blocked", q)
}

// Unblocked is the answer to Unblock.
type Unblocked struct {
	Status string `json:"status"` // "unblocked"
	Phone  string `json:"phone"`
	// DeniedBy is set when the number is still refused by a deny-list
	// entry, which Unblock does not remove.
	DeniedBy *DenyEntry `json:"denied_by,omitempty"`
}

// Unblock clears a number's send counters, cooldown and code: DELETE
// /ops/blocked/{phone}. Audited under the ops key's actor.
func (c *Client) Unblock(ctx context.Context, phone string) (*Unblocked, error) {
	r, err := c.do(ctx, call{method: http.MethodDelete, path: "/ops/blocked/" + url.PathEscape(phone), ops: true}, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return decodeAs[Unblocked](r)
}

// DenyEntry is a deny-list entry.
type DenyEntry struct {
	ID        int64      `json:"id"`
	Pattern   string     `json:"pattern"` // a number, or a prefix ("+" and 1-15 digits)
	Reason    string     `json:"reason"`
	Author    string     `json:"author"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// DenyList lists the live deny-list, oldest first: GET /ops/denylist.
func (c *Client) DenyList(ctx context.Context) ([]DenyEntry, error) {
	out, err := opsGet[struct {
		Entries []DenyEntry `json:"entries"`
	}](ctx, c, "/ops/denylist", nil)
	if err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// DenyRequest adds a deny-list entry. Set at most one of ExpiresAt and
// ExpiresIn; neither: it lasts until removed.
type DenyRequest struct {
	Pattern   string
	Reason    string
	ExpiresAt time.Time
	ExpiresIn time.Duration // whole seconds
	// IdempotencyKey is sent as the Idempotency-Key header; empty: a
	// fresh one for this call. Either way a retry of the call (a network
	// error, a 503 with Retry-After) adds one entry. Set it to carry one
	// key across calls, e.g. a job that may run twice.
	IdempotencyKey string
}

// Deny adds a deny-list entry: POST /ops/denylist. Every instance
// enforces it within its refresh interval. It carries an Idempotency-Key,
// so it is retried: otpguard answers a repeat with the first answer and
// adds nothing.
func (c *Client) Deny(ctx context.Context, req DenyRequest) (*DenyEntry, error) {
	body := struct {
		Pattern   string     `json:"pattern"`
		Reason    string     `json:"reason,omitempty"`
		ExpiresAt *time.Time `json:"expires_at,omitempty"`
		ExpiresIn *int64     `json:"expires_in,omitempty"`
	}{Pattern: req.Pattern, Reason: req.Reason}
	if !req.ExpiresAt.IsZero() {
		t := req.ExpiresAt.UTC()
		body.ExpiresAt = &t
	}
	if req.ExpiresIn > 0 {
		s := int64(req.ExpiresIn / time.Second)
		body.ExpiresIn = &s
	}
	cl := withIdempotencyKey(call{method: http.MethodPost, path: "/ops/denylist", body: body, ops: true}, req.IdempotencyKey)
	r, err := c.do(ctx, cl, http.StatusCreated)
	if err != nil {
		return nil, err
	}
	return decodeAs[DenyEntry](r)
}

// RemoveDeny removes a deny-list entry: DELETE /ops/denylist/{id}. An
// unknown id is an *Error with code not_found.
func (c *Client) RemoveDeny(ctx context.Context, id int64) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/ops/denylist/" + strconv.FormatInt(id, 10), ops: true}, http.StatusNoContent)
	return err
}

// EventFilter narrows GET /ops/events; zero fields are not sent.
type EventFilter struct {
	Phone  string
	Action string // e.g. "otp.send"
	// Service is a Verify service SID: only the events of its calls
	// through the Verify routes; "default": only the events that name no
	// service (the default service's, the desk's own, delivery reports).
	Service  string
	Since    time.Time
	Until    time.Time
	Limit    int
	BeforeID int64 // the NextBeforeID of the previous page
}

// Event is one audit event.
type Event struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Action  string    `json:"action"`
	Outcome string    `json:"outcome"`
	Phone   string    `json:"phone"`
	Country string    `json:"country"`
	IP      string    `json:"ip"`
	Actor   string    `json:"actor"`
	Detail  string    `json:"detail"`
	// RequestID is the X-Request-Id of the request behind the event
	// (empty when none caused it); TraceID its OpenTelemetry trace, when
	// tracing is on.
	RequestID string `json:"request_id"`
	TraceID   string `json:"trace_id,omitempty"`
	// Service is the Verify service SID the call acted for; empty for the
	// default service and for events no service caused.
	Service string `json:"service,omitempty"`
}

// Events is one page of the audit trail, newest first.
type Events struct {
	Events []Event `json:"events"`
	// NextBeforeID pages on (EventFilter.BeforeID); 0 on the last page.
	NextBeforeID int64 `json:"next_before_id,omitempty"`
}

// Events reads the audit trail: GET /ops/events.
func (c *Client) Events(ctx context.Context, f EventFilter) (*Events, error) {
	q := url.Values{}
	setStr(q, "phone", f.Phone)
	setStr(q, "action", f.Action)
	setStr(q, "service", f.Service)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339))
	}
	setInt(q, "limit", int64(f.Limit))
	setInt(q, "before_id", f.BeforeID)
	return opsGet[Events](ctx, c, "/ops/events", q)
}

// Service is one Verify service of the deployment, as GET /ops/services
// lists it: never a secret.
type Service struct {
	// SID is the Verify service SID (VA...); empty for the default
	// service when the policy file marks none default.
	SID          string `json:"sid"`
	FriendlyName string `json:"friendly_name"`
	AccountSID   string `json:"account_sid"`
	// Default: the default service, for which the API keys act.
	Default bool `json:"default"`
	// CredentialSIDs name its credentials (account or API key SIDs).
	CredentialSIDs []string `json:"credential_sids"`
	Note           string   `json:"note,omitempty"`
}

// Services lists the Verify services in force, the default service
// first: GET /ops/services. A deployment that names none lists the
// default service alone.
func (c *Client) Services(ctx context.Context) ([]Service, error) {
	v, err := opsGet[struct {
		Services []Service `json:"services"`
	}](ctx, c, "/ops/services", nil)
	if err != nil {
		return nil, err
	}
	return v.Services, nil
}

func opsGet[T any](ctx context.Context, c *Client, path string, q url.Values) (*T, error) {
	r, err := c.do(ctx, call{method: http.MethodGet, path: path, query: q, ops: true, retry: true}, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return decodeAs[T](r)
}

func decodeAs[T any](r *reply) (*T, error) {
	var v T
	if err := r.decode(&v); err != nil {
		return nil, err
	}
	return &v, nil
}

func setStr(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

func setInt(q url.Values, k string, v int64) {
	if v != 0 {
		q.Set(k, strconv.FormatInt(v, 10))
	}
}
