package sms

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/twilio/twilio-go/client"
	openapi "github.com/twilio/twilio-go/rest/api/v2010"
)

// Compile-time proof that both senders fit the domain's interface.
var (
	_ guard.Sender = (*Console)(nil)
	_ guard.Sender = (*Twilio)(nil)
)

// defaultTwilioTimeout matches twilio-go's own default, so leaving Timeout
// unset behaves like the library does.
const defaultTwilioTimeout = 10 * time.Second

// TwilioOptions configures a Twilio sender. Exactly one of From and
// MessagingServiceSID is set.
type TwilioOptions struct {
	AccountSID          string // "AC..."
	AuthToken           string
	From                string // a Twilio number in E.164, or an alphanumeric sender ID
	MessagingServiceSID string // "MG...": lets Twilio pick the sender per destination
	StatusCallback      string // optional URL Twilio posts delivery status to, set on each message
	// BaseURL, when set, replaces https://api.twilio.com (scheme, host and an
	// optional path prefix), e.g. "http://127.0.0.1:4010" for a local fake.
	// The API path is kept: <BaseURL>/2010-04-01/Accounts/{AccountSID}/Messages.json.
	BaseURL string
	// Timeout bounds one Send, from connecting to reading the reply.
	// Zero means 10s.
	Timeout time.Duration
	// Transport, when set, carries every request instead of
	// http.DefaultTransport: tracing gives one that records a span per
	// provider call and passes the trace context on (W3C traceparent).
	Transport http.RoundTripper
}

// Twilio sends SMS through Twilio's Programmable Messaging API (the
// 2010-04-01 Messages resource) with the official twilio-go client. It is
// safe for concurrent use.
type Twilio struct {
	account    *twilioAccount
	from       string
	serviceSID string
}

// NewTwilio checks o and returns a Twilio sender. It reports every problem
// at once, so a misconfigured deployment fails at boot rather than on the
// first code sent.
func NewTwilio(o TwilioOptions) (*Twilio, error) {
	account, errs := newTwilioAccount(o)
	if (o.From == "") == (o.MessagingServiceSID == "") {
		errs = append(errs, errors.New("sms: twilio: set exactly one of From and MessagingServiceSID"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Twilio{account: account, from: o.From, serviceSID: o.MessagingServiceSID}, nil
}

// Send asks Twilio to deliver m. A nil error means Twilio accepted (queued)
// the message, not that it reached the phone; delivery is reported to
// StatusCallback. The call ends at the earlier of ctx and the Timeout.
func (t *Twilio) Send(ctx context.Context, m guard.Message) error {
	params := &openapi.CreateMessageParams{}
	params.SetTo(m.To).SetBody(m.Body)
	if t.serviceSID != "" {
		params.SetMessagingServiceSid(t.serviceSID)
	} else {
		params.SetFrom(t.from)
	}
	if cb := t.account.statusCallback; cb != "" {
		params.SetStatusCallback(cb)
	}
	return t.account.call(ctx, "create message", smsRefusals, func(api *openapi.ApiService) error {
		_, err := api.CreateMessage(params)
		return err
	}, m.Body, m.Code)
}

// twilioError turns a twilio-go failure into the domain's error. The
// caller-facing Message is fixed text; the cause stays in Err for the logs.
// A Twilio refusal is kept as a *client.TwilioRestError (status, code,
// more_info) but never with Twilio's text as sent: for 21211, 21408, 21612
// and the like it quotes the To number, and no full number may reach a log.
// When the exchange x proves the message was not taken (notSent), the
// cause is a *NotSent with Twilio's Retry-After.
//
// op names the call ("create message"); refuses tells the codes that mean
// the destination refused; secrets are the texts that carry the code.
func twilioError(err error, op string, refuses map[int]bool, x *exchange, now time.Time, secrets ...string) *problem.Error {
	not := notSent(err, x)
	var rest *client.TwilioRestError
	if errors.As(err, &rest) {
		rest = loggableRestError(rest, secrets...)
		err = rest // not wrapped: whatever wrapped it may quote its text
	}
	var wrapped error = fmt.Errorf("sms: twilio: %s: %w", op, err)
	if not {
		wrapped = &NotSent{Wait: providerWait(x.retryAfter, now), Err: wrapped}
	}
	if rest != nil && refuses[rest.Code] {
		return &problem.Error{
			Code:    problem.CodeInvalidDestination,
			Message: "the SMS provider refused the destination number",
			Err:     wrapped,
		}
	}
	return unavailable(wrapped)
}

// loggableRestError is a copy of e fit for a log: its Message with every
// phone number masked, and without Details, free-form JSON that may hold
// the numbers too. Other twilio-go errors need no such care: a transport
// error names the URL (the account, never the To number, which travels in
// the form body), a decoding error names no content, and RestErrorV1 is
// only for APIs of Twilio's v1.0 standard, not the 2010 Messages API.
//
// Nor may the code: a refusal that quotes the message (a filter's "Message
// filtered: '...'") would put it in the log, so the body is cut out, and
// any other run of 4 or more digits is hidden too, a code quoted alone.
//
// secrets are cut out longest first (the message, the TwiML, then the
// code alone, which a spaced code's digits do not form a run of).
func loggableRestError(e *client.TwilioRestError, secrets ...string) *client.TwilioRestError {
	msg := e.Message
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<the message>")
		}
	}
	return &client.TwilioRestError{
		Code:     e.Code,
		Message:  digitRun.ReplaceAllString(maskNumbers(msg), "<digits>"),
		MoreInfo: e.MoreInfo,
		Status:   e.Status,
	}
}

// phoneLike matches what may be a phone number in free text: 7 or more
// digits, optionally after a '+', with up to two separators between digits
// ("+919800000000", "(415) 555-0100"). Twilio's own codes (5 digits) are
// left alone.
var phoneLike = regexp.MustCompile(`\+?[0-9](?:[ ().-]{0,2}[0-9]){6,}`)

// digitRun is 4 or more digits in a row: a code, once phone numbers are
// masked (a masked number keeps at most 3 digits in a row).
var digitRun = regexp.MustCompile(`[0-9]{4,}`)

// maskNumbers masks, as guard.MaskPhone does, every phone-like run of s.
func maskNumbers(s string) string {
	return phoneLike.ReplaceAllStringFunc(s, func(m string) string {
		return guard.MaskPhone(strings.Map(func(r rune) rune {
			if r == '+' || '0' <= r && r <= '9' {
				return r
			}
			return -1 // MaskPhone keeps characters at the ends, not digits
		}, m))
	})
}

// smsRefusals are the Twilio error codes that mean the number itself
// will not take our SMS, so retrying cannot help and the user must give
// another number. Every other code (20003 bad credentials, 20429 rate
// limit, 21606 our From cannot send SMS, 5xx...) is our side's problem and
// reads as provider_unavailable. See https://www.twilio.com/docs/api/errors.
var smsRefusals = map[int]bool{
	21211: true, // the 'To' number is not a valid phone number
	21408: true, // sending to the To number's region is not enabled on the account
	21610: true, // the recipient unsubscribed (replied STOP)
	21612: true, // the To number cannot be reached by SMS from this sender
	21614: true, // the To number is not a mobile number
}

// ctxTransport binds every request of one Send to that Send's context,
// because twilio-go gives us no other way to pass one, and records what
// the exchange x saw of it.
type ctxTransport struct {
	ctx  context.Context
	next http.RoundTripper
	x    *exchange
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r.WithContext(httptrace.WithClientTrace(t.ctx, t.x.trace())))
	if resp != nil {
		t.x.answered(resp)
	}
	return resp, err
}

// rebased points twilio-go at another Twilio-compatible host. twilio-go
// hard-codes https://api.twilio.com in its services and has no option for
// it, but every request passes through BaseClient.SendRequest with its full
// URL (after twilio-go's edge/region rewriting), so this is the one place
// to swap scheme and host while keeping the API path and query.
type rebased struct {
	*client.Client
	base *url.URL
}

func (r rebased) SendRequest(method, rawURL string, data url.Values,
	headers map[string]any, body ...byte) (*http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sms: twilio: rebase: %w", err)
	}
	to := r.base.JoinPath(u.Path)
	to.RawQuery = u.RawQuery
	return r.Client.SendRequest(method, to.String(), data, headers, body...)
}

// parseHTTPURL accepts an absolute http or https URL: Twilio calls back
// nothing else, and a base URL without a host cannot be dialled.
func parseHTTPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, err
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: scheme must be http or https", s)
	case u.Host == "":
		return nil, fmt.Errorf("%q: host is required", s)
	}
	return u, nil
}

// alphanumeric mirrors twilio-go's credential check (^[a-zA-Z0-9]*$).
func alphanumeric(s string) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}
