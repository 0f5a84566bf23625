package client

import (
	"context"
	"net/url"
	"time"
)

// NumberAnswer is what the service knows of one number, GET
// /ops/numbers/{phone}: the answer to "why did +X get no code?".
type NumberAnswer struct {
	Phone   string `json:"phone"` // E.164
	Country string `json:"country,omitempty"`
	// Refusing is what refuses its next send now, worst first; empty when
	// nothing of its own does (a budget, pause or alert of its country may).
	Refusing []NumberReason `json:"refusing"`
	DeniedBy *DenyEntry     `json:"denied_by,omitempty"`
	Blocks   []Block        `json:"blocks"`
	// Sends is its own send window and Cooldown its cooldown; nil when
	// off or not read.
	Sends    *NumberWindow `json:"sends,omitempty"`
	Cooldown *NumberWindow `json:"cooldown,omitempty"`
	// HasCode: it has a live code, which Code describes; nil when it
	// could not be read.
	HasCode *bool       `json:"has_code,omitempty"`
	Code    *NumberCode `json:"code,omitempty"`
	// ServiceCodes are each Verify service's live code of the number
	// (each service keeps its own), as HasCode and Code are the default
	// service's; empty without services.
	ServiceCodes []NumberServiceCode `json:"service_codes,omitempty"`
	// Trusted: its trust mark is set; nil when marks are off or could
	// not be read.
	Trusted *bool       `json:"trusted,omitempty"`
	Risk    *NumberRisk `json:"risk,omitempty"`
	Events  []Event     `json:"events"`
	// Errors name the parts that could not be read.
	Errors []string `json:"errors,omitempty"`
}

// NumberReason is one thing that refuses a number's next send.
type NumberReason struct {
	Code string `json:"code"` // denied, a block's reason, phone_rate_limited, cooldown, high_risk_number
	Text string `json:"text"`
	// ClearsInSeconds is when it clears by itself; 0: not by itself.
	ClearsInSeconds int64 `json:"clears_in_seconds,omitempty"`
}

// NumberWindow is one of a number's windows: used, limit and when it is
// full again.
type NumberWindow struct {
	Count           int64 `json:"count"`
	Limit           int64 `json:"limit"`
	WindowSeconds   int64 `json:"window_seconds"`
	ResetsInSeconds int64 `json:"resets_in_seconds"`
	Refusing        bool  `json:"refusing"` // the next send would pass the limit
}

// NumberServiceCode is a Verify service's live code of a number.
type NumberServiceCode struct {
	Service string      `json:"service"` // the service's SID
	HasCode *bool       `json:"has_code,omitempty"`
	Code    *NumberCode `json:"code,omitempty"`
}

// NumberCode is a number's live code, read without counting a guess.
type NumberCode struct {
	Guesses     int64 `json:"guesses"` // wrong guesses used, at most MaxAttempts
	MaxAttempts int64 `json:"max_attempts"`
	// Locked: a wrong guess used the last attempt (max_attempts_reached);
	// every guess is refused until the code expires.
	Locked           bool  `json:"locked"`
	ExpiresInSeconds int64 `json:"expires_in_seconds"`
}

// NumberRisk is the network's cached risk answer for a number (otp.risk).
type NumberRisk struct {
	Score       int       `json:"score"`
	Blocked     bool      `json:"blocked"`
	LineType    string    `json:"line_type,omitempty"`
	CarrierRisk string    `json:"carrier_risk,omitempty"`
	At          time.Time `json:"at"`
}

// LookUpNumber answers what the service knows of one number (any spelling
// /otp/send takes): GET /ops/numbers/{phone}. Audited as ops.lookup with
// the number masked.
func (c *Client) LookUpNumber(ctx context.Context, phone string) (*NumberAnswer, error) {
	return opsGet[NumberAnswer](ctx, c, "/ops/numbers/"+url.PathEscape(phone), nil)
}
