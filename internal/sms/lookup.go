package sms

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twilio/twilio-go/client"
	lookups "github.com/twilio/twilio-go/rest/lookups/v2"

	"github.com/otpguard/otpguard/internal/guard"
)

var _ guard.RiskLookup = (*Lookup)(nil)

// Defaults of the Lookup client.
const (
	// DefaultLookupTimeout bounds one lookup when LookupOptions.Timeout is
	// 0; otp.risk.timeout, the policy's own bound, is usually shorter.
	DefaultLookupTimeout = 3 * time.Second
	// DefaultLookupCalls is how many lookups one instance has under way
	// at once when LookupOptions.MaxInFlight is 0.
	DefaultLookupCalls = 8
)

// lookupFields are the Lookup v2 packages asked: the risk score, and the
// live line type, which overrides the static number type.
const lookupFields = "sms_pumping_risk,line_type_intelligence"

// LookupOptions configures the Lookup v2 client.
type LookupOptions struct {
	AccountSID string
	AuthToken  string
	// BaseURL, when set, replaces https://lookups.twilio.com (a local fake).
	BaseURL string
	// Timeout bounds one lookup, from connecting to reading the reply (0:
	// DefaultLookupTimeout); the caller's context may end it sooner.
	Timeout time.Duration
	// MaxInFlight bounds the lookups under way at once (0:
	// DefaultLookupCalls). A lookup past it fails at once, never queued:
	// a slow or hung Lookup holds at most this many of the instance's
	// in-flight slots (as the CAPTCHA provider's calls,
	// challenge.ProviderCalls).
	MaxInFlight int
	// Transport carries every request (nil: http.DefaultTransport).
	Transport http.RoundTripper
}

// Lookup asks Twilio Lookup v2 for a number's SMS pumping risk score and
// line type, with the official twilio-go client. Calls are never retried:
// a lookup costs money, and a slow answer is no answer. It is safe for
// concurrent use.
type Lookup struct {
	creds      *client.Credentials
	accountSID string
	base       *url.URL // nil: the real Twilio API
	timeout    time.Duration
	slots      chan struct{}
	transport  http.RoundTripper
}

// ErrLookupBusy is a lookup refused because MaxInFlight lookups are under
// way.
var ErrLookupBusy = errors.New("sms: lookup: too many lookups under way")

// NewLookup checks o and returns a Lookup client.
func NewLookup(o LookupOptions) (*Lookup, error) {
	var errs []error
	if !strings.HasPrefix(o.AccountSID, "AC") || !alphanumeric(o.AccountSID) {
		errs = append(errs, errors.New("sms: lookup: account SID must be \"AC\" followed by letters and digits"))
	}
	if o.AuthToken == "" || !alphanumeric(o.AuthToken) {
		errs = append(errs, errors.New("sms: lookup: auth token must be letters and digits"))
	}
	var base *url.URL
	if o.BaseURL != "" {
		u, err := parseHTTPURL(o.BaseURL)
		if err != nil {
			errs = append(errs, fmt.Errorf("sms: lookup: base URL: %w", err))
		}
		base = u
	}
	if o.Timeout < 0 || o.MaxInFlight < 0 {
		errs = append(errs, errors.New("sms: lookup: timeout and max in flight must not be negative"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	l := &Lookup{creds: client.NewCredentials(o.AccountSID, o.AuthToken), accountSID: o.AccountSID, base: base,
		timeout: o.Timeout, transport: o.Transport, slots: make(chan struct{}, max(1, o.MaxInFlight))}
	if l.timeout == 0 {
		l.timeout = DefaultLookupTimeout
	}
	if o.MaxInFlight == 0 {
		l.slots = make(chan struct{}, DefaultLookupCalls)
	}
	if l.transport == nil {
		l.transport = http.DefaultTransport
	}
	return l, nil
}

// LookupRisk asks for e164's SMS pumping risk and line type. It ends at
// the earlier of ctx and the client's timeout; an answer without a score
// (Lookup's error_code, or no sms_pumping_risk) is an error.
func (l *Lookup) LookupRisk(ctx context.Context, e164 string) (guard.RiskAnswer, error) {
	select {
	case l.slots <- struct{}{}:
		defer func() { <-l.slots }()
	default:
		return guard.RiskAnswer{}, ErrLookupBusy
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel() // also frees error replies, whose bodies twilio-go never closes
	// As a send: each call gets an http.Client bound to ctx.
	api := lookups.NewApiService(callHandler(ctx, l.creds, l.accountSID, l.base, l.transport, &exchange{}))
	params := &lookups.FetchPhoneNumberParams{}
	params.SetFields(lookupFields)
	resp, err := api.FetchPhoneNumber(e164, params)
	if err != nil {
		var rest *client.TwilioRestError
		var uerr *url.Error
		switch {
		case errors.As(err, &rest):
			err = loggableRestError(rest, "") // Twilio's text may quote the number
		case errors.As(err, &uerr):
			err = fmt.Errorf("%s: %w", uerr.Op, uerr.Err) // its URL holds the number
		}
		return guard.RiskAnswer{}, fmt.Errorf("sms: lookup %s: %w", guard.MaskPhone(e164), err)
	}
	risk := resp.SmsPumpingRisk
	if risk.ErrorCode != 0 || risk.CarrierRiskCategory == "" && risk.SmsPumpingRiskScore == 0 && !risk.NumberBlocked {
		return guard.RiskAnswer{}, fmt.Errorf("sms: lookup %s: no sms_pumping_risk (error code %d)", guard.MaskPhone(e164), risk.ErrorCode)
	}
	a := guard.RiskAnswer{Score: min(100, max(0, risk.SmsPumpingRiskScore)), CarrierRisk: risk.CarrierRiskCategory,
		Blocked: risk.NumberBlocked}
	if resp.LineTypeIntelligence.ErrorCode == 0 {
		a.LineType = resp.LineTypeIntelligence.Type
	}
	return a, nil
}
