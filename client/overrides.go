package client

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// The emergency overrides of the policy file (README.md, "Changing limits
// during an attack"): GET/POST /ops/overrides, DELETE /ops/overrides/{id}.
// Every call needs WithOpsKey.

// The kinds of override.
const (
	OverrideCountryLimit = "country_limit"   // lowers otp.per_country for Subject (ISO 3166-1 alpha-2, or "001")
	OverrideCountryPause = "country_pause"   // refuses every send to Subject's country (403 country_paused); no Limit
	OverrideCarrierLimit = "carrier_limit"   // limits the sends to Subject's carrier of a country ("NG / MTN") to Limit an hour (429 carrier_rate_limited)
	OverrideCarrierPause = "carrier_pause"   // refuses every send to Subject's carrier of a country (403 carrier_paused); no Limit
	OverridePrefixLimit  = "prefix_limit"    // limits the sends under Subject ("+" and 1 to 15 digits)
	OverrideBudgetHour   = "budget_per_hour" // lowers otp.budget's hourly limit; no Subject
	OverrideBudgetDay    = "budget_per_day"  // lowers otp.budget's daily limit; no Subject
)

// Override is one override in force.
type Override struct {
	ID      int64  `json:"id"`
	Kind    string `json:"kind"`              // one of the Override* kinds
	Subject string `json:"subject,omitempty"` // the country, carrier ("NG/mtn") or prefix; empty for the budgets
	// SubjectName is a carrier's subject as people read it, "NG / MTN".
	SubjectName string `json:"subject_name,omitempty"`
	// Limit is the override's (nil for a pause); FileLimit the policy
	// file's for the same rule (nil when the file has none). What applies
	// is the lower.
	Limit     *int64    `json:"limit,omitempty"`
	FileLimit *int64    `json:"file_limit,omitempty"`
	Reason    string    `json:"reason"`
	Author    string    `json:"author"` // the actor that made it, "ops:<key id>"
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// ExpiresInSeconds is the whole seconds it had left when read.
	ExpiresInSeconds int64 `json:"expires_in_seconds"`
}

// OverrideRequest makes an override. An override can only tighten the
// policy file: a Limit above the file's for the same rule is an *Error
// with code override_looser (Field "limit").
type OverrideRequest struct {
	Kind    string // one of the Override* kinds
	Subject string // the country, carrier ("NG / MTN") or prefix; empty for the budgets
	Limit   int64  // sends per the rule's window; 0 (absent) for a pause
	// ExpiresIn is how long it lasts, in whole seconds; 0: otpguard's
	// default (24 h); at most 7 days.
	ExpiresIn time.Duration
	Reason    string // required
	// IdempotencyKey is sent as the Idempotency-Key header; empty: a
	// fresh one for this call. Either way a retry of the call (a network
	// error, a 503 with Retry-After) makes one override. Set it to carry
	// one key across calls, e.g. a job that may run twice.
	IdempotencyKey string
}

// CodeOverrideLooser is the refusal of an override that would loosen the
// policy file.
const CodeOverrideLooser = "override_looser"

// Overrides lists the overrides in force, oldest first: GET
// /ops/overrides.
func (c *Client) Overrides(ctx context.Context) ([]Override, error) {
	out, err := opsGet[struct {
		Overrides []Override `json:"overrides"`
	}](ctx, c, "/ops/overrides", nil)
	if err != nil {
		return nil, err
	}
	return out.Overrides, nil
}

// AddOverride puts an override in force: POST /ops/overrides. This
// instance enforces it at once, every other within its deny-list refresh
// interval. It carries an Idempotency-Key, so it is retried: otpguard
// answers a repeat with the first answer and adds nothing. A refusal of
// one field is an *Error whose Field names it.
func (c *Client) AddOverride(ctx context.Context, req OverrideRequest) (*Override, error) {
	body := struct {
		Kind      string `json:"kind"`
		Subject   string `json:"subject,omitempty"`
		Limit     int64  `json:"limit,omitempty"`
		ExpiresIn *int64 `json:"expires_in,omitempty"`
		Reason    string `json:"reason"`
	}{Kind: req.Kind, Subject: req.Subject, Limit: req.Limit, Reason: req.Reason}
	if req.ExpiresIn > 0 {
		s := int64(req.ExpiresIn / time.Second)
		body.ExpiresIn = &s
	}
	cl := withIdempotencyKey(call{method: http.MethodPost, path: "/ops/overrides", body: body, ops: true}, req.IdempotencyKey)
	r, err := c.do(ctx, cl, http.StatusCreated)
	if err != nil {
		return nil, err
	}
	return decodeAs[Override](r)
}

// RemoveOverride removes an override, so the policy file's value applies
// again: DELETE /ops/overrides/{id}. An unknown id is an *Error with code
// not_found. Not retried.
func (c *Client) RemoveOverride(ctx context.Context, id int64) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/ops/overrides/" + strconv.FormatInt(id, 10), ops: true}, http.StatusNoContent)
	return err
}
