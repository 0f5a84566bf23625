package sms

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twilio/twilio-go/client"
	openapi "github.com/twilio/twilio-go/rest/api/v2010"
)

// twilioAccount is what every Twilio channel (SMS, WhatsApp, voice) shares:
// the account's credentials, where its API is, the status callback set on
// each message or call, and how one call to the API is made.
type twilioAccount struct {
	creds          *client.Credentials // read-only once built
	accountSID     string
	statusCallback string
	base           *url.URL // nil: the real Twilio API
	timeout        time.Duration
	transport      http.RoundTripper // shared, so connections are reused across sends
}

// newTwilioAccount checks the account's part of o (credentials, status
// callback, base URL, timeout) and returns every problem it found.
func newTwilioAccount(o TwilioOptions) (*twilioAccount, []error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("sms: twilio: "+format, args...))
	}
	// twilio-go refuses credentials with other characters on every request
	// (its error 21222/21224); checking here turns that into a boot error.
	switch {
	case o.AccountSID == "":
		bad("account SID is required")
	case !strings.HasPrefix(o.AccountSID, "AC") || !alphanumeric(o.AccountSID):
		bad("account SID must be \"AC\" followed by letters and digits")
	}
	switch {
	case o.AuthToken == "":
		bad("auth token is required")
	case !alphanumeric(o.AuthToken):
		bad("auth token must be letters and digits only")
	}
	if o.StatusCallback != "" {
		if _, err := parseHTTPURL(o.StatusCallback); err != nil {
			bad("status callback: %w", err)
		}
	}
	var base *url.URL
	if o.BaseURL != "" {
		u, err := parseHTTPURL(o.BaseURL)
		switch {
		case err != nil:
			bad("base URL: %w", err)
		case u.RawQuery != "" || u.Fragment != "":
			// Twilio's paths are appended to it; a query would be dropped.
			bad("base URL %q: query and fragment are not allowed", o.BaseURL)
		}
		base = u
	}
	if o.Timeout < 0 {
		bad("timeout must not be negative, got %s", o.Timeout)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = defaultTwilioTimeout
	}
	transport := o.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &twilioAccount{
		creds:          client.NewCredentials(o.AccountSID, o.AuthToken),
		accountSID:     o.AccountSID,
		statusCallback: o.StatusCallback,
		base:           base,
		timeout:        timeout,
		transport:      transport,
	}, nil
}

// call makes one call to the 2010-04-01 API with do, bound to ctx and the
// account's timeout, and turns its failure into the domain's error
// (twilioError: op names it, refuses are the codes that mean the
// destination refused, secrets the texts that carry the code).
func (a *twilioAccount) call(ctx context.Context, op string, refuses map[int]bool,
	do func(*openapi.ApiService) error, secrets ...string) error {
	if err := ctx.Err(); err != nil { // no call made: surely not sent
		return unavailable(&NotSent{Err: fmt.Errorf("sms: twilio: %s: %w", op, err)})
	}
	// twilio-go builds every request on context.Background() and takes no
	// context. The only way to make a call end with ctx is an http.Client
	// bound to it, so each call gets its own; the connection pool lives in
	// the shared transport. The timeout is a context deadline, not
	// http.Client.Timeout: ctxTransport replaces the request's context, and
	// with it the deadline http.Client would have put there.
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	// Cancelling also frees error replies: twilio-go decodes but never
	// closes their bodies.
	defer cancel()

	x := &exchange{} // what the call saw, for telling a refusal (notSent)
	api := openapi.NewApiService(callHandler(ctx, a.creds, a.accountSID, a.base, a.transport, x))
	if err := do(api); err != nil {
		return twilioError(err, op, refuses, x, time.Now(), secrets...)
	}
	return nil
}

// callHandler is twilio-go's request handler for one call bound to ctx
// (twilio-go takes no context): the account's credentials, its base URL
// (base, nil the real API), and an http.Client whose transport records
// the exchange in x and which, as twilio-go's default client, never
// follows a redirect, so credentials are never sent to another host. A
// RequestHandler literal rather than client.NewRequestHandler, which
// reads TWILIO_EDGE and TWILIO_REGION from the environment: all of the
// configuration comes from the options.
func callHandler(ctx context.Context, creds *client.Credentials, accountSID string, base *url.URL, transport http.RoundTripper, x *exchange) *client.RequestHandler {
	c := &client.Client{
		Credentials: creds,
		HTTPClient: &http.Client{
			Transport:     ctxTransport{ctx: ctx, next: transport, x: x},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	c.SetAccountSid(accountSID)
	var bc client.BaseClient = c
	if base != nil {
		bc = rebased{Client: c, base: base}
	}
	return &client.RequestHandler{Client: bc}
}
