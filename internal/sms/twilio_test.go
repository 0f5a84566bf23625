package sms

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/twilio/twilio-go/client"
)

const (
	testSID     = "AC0123456789abcdef0123456789abcdef"
	testToken   = "0123456789abcdef0123456789abcdef"
	testFrom    = "+15005550006"
	testService = "MG0123456789abcdef0123456789abcdef"
	testTo      = "+14155550100"
	testCode    = "493817"
	testBody    = "Your otpguard code is " + testCode
	messagesAPI = "/2010-04-01/Accounts/" + testSID + "/Messages.json"
)

// twilioRequest is what the fake saw of one call: the parts of the Messages
// API contract a real Twilio checks.
type twilioRequest struct {
	Method, Path, ContentType string
	User, Password            string
	BasicAuth                 bool
	Form                      url.Values
}

// fakeTwilio is an httptest server speaking the Messages API: it records
// each request and answers with reply.
type fakeTwilio struct {
	*httptest.Server
	mu       sync.Mutex
	requests []twilioRequest
}

func newFakeTwilio(t *testing.T, reply http.HandlerFunc) *fakeTwilio {
	t.Helper()
	f := &fakeTwilio{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake twilio: parse form: %v", err)
		}
		user, pass, ok := r.BasicAuth()
		f.mu.Lock()
		f.requests = append(f.requests, twilioRequest{
			Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"),
			User: user, Password: pass, BasicAuth: ok, Form: r.PostForm,
		})
		f.mu.Unlock()
		reply(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeTwilio) seen() []twilioRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// created answers like Twilio does when it queues a message.
func created(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusCreated, map[string]any{
		"sid":    "SM0123456789abcdef0123456789abcdef",
		"status": "queued",
		"to":     r.PostForm.Get("To"),
		"body":   r.PostForm.Get("Body"),
	})
}

// twilioFails answers with Twilio's error body.
func twilioFails(status, code int, message string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, status, map[string]any{
			"code":      code,
			"message":   message,
			"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code),
			"status":    status,
		})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newTestTwilio(t *testing.T, o TwilioOptions) *Twilio {
	t.Helper()
	tw, err := NewTwilio(o)
	if err != nil {
		t.Fatalf("NewTwilio() error = %v", err)
	}
	return tw
}

// checkSafeError checks what every failed Send must honour: a *problem.Error
// with the wanted code, a cause for the logs, and no trace of the body, the
// code or the full To number anywhere in its text, nor in a log line
// written as guard writes one ("err", err).
func checkSafeError(t *testing.T, err error, want problem.Code) *problem.Error {
	t.Helper()
	var ge *problem.Error
	if !errors.As(err, &ge) {
		t.Fatalf("Send() error = %v (%T), want *problem.Error", err, err)
	}
	if ge.Code != want {
		t.Errorf("Code = %q, want %q (err: %v)", ge.Code, want, err)
	}
	if ge.Err == nil {
		t.Errorf("Err = nil, want the cause for the logs")
	}
	var logged bytes.Buffer
	// Without the time: its nanoseconds may hold the code's digits by chance.
	noTime := func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}
	slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{ReplaceAttr: noTime})).Warn("sms not sent", "phone", guard.MaskPhone(testTo), "err", err)
	for _, secret := range []string{testBody, testCode, testTo, strings.TrimPrefix(testTo, "+")} {
		if strings.Contains(err.Error(), secret) || strings.Contains(ge.Message, secret) {
			t.Errorf("error %q (message %q) contains %q", err, ge.Message, secret)
		}
		if strings.Contains(logged.String(), secret) {
			t.Errorf("log line %s contains %q", logged.Bytes(), secret)
		}
	}
	return ge
}

func TestTwilioSend(t *testing.T) {
	form := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	tests := []struct {
		name     string
		opts     TwilioOptions // AccountSID, AuthToken and BaseURL are filled in
		prefix   string        // path appended to the server URL in BaseURL
		reply    http.HandlerFunc
		wantForm url.Values
		wantCode problem.Code  // "" for success
		wantRest int           // Twilio error code expected in the chain, 0 for none
		wantText string        // in the error text: what is left of Twilio's message
		wantWait time.Duration // the Retry-After passed on (guard.ProviderWait)
	}{
		{
			name:     "success with From",
			opts:     TwilioOptions{From: testFrom},
			reply:    created,
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
		},
		{
			name:     "success with messaging service and status callback",
			opts:     TwilioOptions{MessagingServiceSID: testService, StatusCallback: "https://otp.example.com/twilio/status?k=1"},
			reply:    created,
			wantForm: form("To", testTo, "Body", testBody, "MessagingServiceSid", testService, "StatusCallback", "https://otp.example.com/twilio/status?k=1"),
		},
		{
			name:     "base URL with a path prefix",
			opts:     TwilioOptions{From: testFrom},
			prefix:   "/twilio/",
			reply:    created,
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
		},
		{
			name:     "21211 invalid To",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(400, 21211, "The 'To' number "+testTo+" is not a valid phone number."),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeInvalidDestination,
			wantRest: 21211,
			wantText: guard.MaskPhone(testTo),
		},
		{
			name:     "21408 region not enabled",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(400, 21408, "Permission to send an SMS has not been enabled for the region indicated by the 'To' number: "+testTo+"."),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeInvalidDestination,
			wantRest: 21408,
			wantText: guard.MaskPhone(testTo),
		},
		{
			name:     "21612 unreachable, quoting both numbers",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(400, 21612, "The 'To' phone number: "+testTo+", is not currently reachable using the 'From' phone number: "+testFrom+" via SMS."),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeInvalidDestination,
			wantRest: 21612,
			wantText: guard.MaskPhone(testTo),
		},
		{
			name:     "21614 not a mobile number",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(400, 21614, "'To' number "+testTo+" is not a valid mobile number"),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeInvalidDestination,
			wantRest: 21614,
			wantText: guard.MaskPhone(testTo),
		},
		{
			name:     "21606 our From cannot send is not the destination's fault",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(400, 21606, "The 'From' phone number provided is not a valid message-capable Twilio phone number."),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
			wantRest: 21606,
		},
		{
			name:     "401 20003 authentication failed",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(401, 20003, "Authenticate"),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
			wantRest: 20003,
		},
		{
			name:     "429 rate limited",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(429, 20429, "Too Many Requests"),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
			wantRest: 20429,
		},
		{
			name: "429 rate limited, with Retry-After",
			opts: TwilioOptions{From: testFrom},
			reply: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				twilioFails(429, 20429, "Too Many Requests")(w, r)
			},
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
			wantRest: 20429,
			wantWait: 7 * time.Second,
		},
		{
			name:     "500 with a Twilio error body",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(500, 20500, "Internal Server Error"),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
			wantRest: 20500,
		},
		{
			name:     "an error that repeats the message body",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(400, 30007, "Message filtered: '"+testBody+"' looks like spam"),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
			wantRest: 30007,
		},
		{
			name:     "an error that repeats the code alone",
			opts:     TwilioOptions{From: testFrom},
			reply:    twilioFails(400, 30007, "Message filtered: content "+testCode+" looks like spam"),
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
			wantRest: 30007,
		},
		{
			name: "502 from a proxy, not JSON",
			opts: TwilioOptions{From: testFrom},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
			},
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
		},
		{
			name: "403 from a proxy, not JSON",
			opts: TwilioOptions{From: testFrom},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "<html>forbidden</html>", http.StatusForbidden)
			},
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
		},
		{
			name: "201 with a body that is not JSON",
			opts: TwilioOptions{From: testFrom},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte("queued"))
			},
			wantForm: form("To", testTo, "Body", testBody, "From", testFrom),
			wantCode: problem.CodeProviderUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeTwilio(t, tt.reply)
			o := tt.opts
			o.AccountSID, o.AuthToken, o.BaseURL = testSID, testToken, fake.URL+tt.prefix
			tw := newTestTwilio(t, o)

			err := tw.Send(context.Background(), guard.Message{To: testTo, Body: testBody})

			if tt.wantCode == "" {
				if err != nil {
					t.Errorf("Send() error = %v, want nil", err)
				}
			} else {
				ge := checkSafeError(t, err, tt.wantCode)
				var rest *client.TwilioRestError
				switch {
				case tt.wantRest == 0 && errors.As(ge, &rest):
					t.Errorf("Err holds Twilio error %d, want none", rest.Code)
				case tt.wantRest != 0 && !errors.As(ge, &rest):
					t.Errorf("Err = %v, want Twilio error %d in the chain", ge.Err, tt.wantRest)
				case tt.wantRest != 0 && rest.Code != tt.wantRest:
					t.Errorf("Twilio error code = %d, want %d", rest.Code, tt.wantRest)
				}
				if !strings.Contains(err.Error(), tt.wantText) {
					t.Errorf("Send() error = %q, want it to contain %q", err, tt.wantText)
				}
				// Certainly not sent, so the number's try comes back:
				// Twilio answered with an error of its own, or anyone with
				// a 4xx. A gateway's 5xx page, or a 2xx that cannot be
				// read, may hide a message that left.
				wantNotSent := tt.wantRest != 0 || strings.HasPrefix(tt.name, "403")
				if got := errors.Is(err, guard.ErrNotSent); got != wantNotSent {
					t.Errorf("errors.Is(err, ErrNotSent) = %v, want %v (%v)", got, wantNotSent, err)
				}
				var wait guard.ProviderWait
				if got := errors.As(err, &wait); got != wantNotSent {
					t.Errorf("errors.As(err, ProviderWait) = %v, want %v", got, wantNotSent)
				} else if got && wait.ProviderWait() != tt.wantWait {
					t.Errorf("ProviderWait() = %v, want %v", wait.ProviderWait(), tt.wantWait)
				}
			}

			want := []twilioRequest{{
				Method:      http.MethodPost,
				Path:        strings.TrimSuffix(tt.prefix, "/") + messagesAPI,
				ContentType: "application/x-www-form-urlencoded",
				User:        testSID, Password: testToken, BasicAuth: true,
				Form: tt.wantForm,
			}}
			if diff := cmp.Diff(want, fake.seen()); diff != "" {
				t.Errorf("requests to fake Twilio mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMaskNumbers(t *testing.T) {
	tests := []struct{ in, want string }{
		{"The 'To' number +919800000000 is not a valid phone number.", "The 'To' number +91********00 is not a valid phone number."},
		{"'To' number 919800000000 is not a valid mobile number", "'To' number 919*******00 is not a valid mobile number"},
		{"To: +1 415-555-0100, From: (415) 555.0199", "To: +14*******00, From: (415*****99"},
		{"ApiError 21211, HTTP 400", "ApiError 21211, HTTP 400"},
		{"Authenticate", "Authenticate"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := maskNumbers(tt.in); got != tt.want {
			t.Errorf("maskNumbers(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNewTwilio(t *testing.T) {
	valid := TwilioOptions{AccountSID: testSID, AuthToken: testToken, From: testFrom}
	with := func(change func(o *TwilioOptions)) TwilioOptions {
		o := valid
		change(&o)
		return o
	}
	tests := []struct {
		name        string
		opts        TwilioOptions
		wantErr     bool
		wantTimeout time.Duration // checked when no error
	}{
		{name: "From", opts: valid, wantTimeout: 10 * time.Second},
		{name: "messaging service", opts: with(func(o *TwilioOptions) { o.From, o.MessagingServiceSID = "", testService }), wantTimeout: 10 * time.Second},
		{name: "callback, base URL and timeout", opts: with(func(o *TwilioOptions) {
			o.StatusCallback, o.BaseURL, o.Timeout = "https://otp.example.com/status?k=1", "http://127.0.0.1:4010", 3*time.Second
		}), wantTimeout: 3 * time.Second},
		{name: "no account SID", opts: with(func(o *TwilioOptions) { o.AccountSID = "" }), wantErr: true},
		{name: "account SID not AC", opts: with(func(o *TwilioOptions) { o.AccountSID = "SK0123456789abcdef" }), wantErr: true},
		{name: "account SID with a newline", opts: with(func(o *TwilioOptions) { o.AccountSID = testSID + "\n" }), wantErr: true},
		{name: "no auth token", opts: with(func(o *TwilioOptions) { o.AuthToken = "" }), wantErr: true},
		{name: "auth token with a space", opts: with(func(o *TwilioOptions) { o.AuthToken = testToken + " " }), wantErr: true},
		{name: "From and messaging service", opts: with(func(o *TwilioOptions) { o.MessagingServiceSID = testService }), wantErr: true},
		{name: "neither From nor messaging service", opts: with(func(o *TwilioOptions) { o.From = "" }), wantErr: true},
		{name: "callback not http", opts: with(func(o *TwilioOptions) { o.StatusCallback = "ftp://otp.example.com/status" }), wantErr: true},
		{name: "callback relative", opts: with(func(o *TwilioOptions) { o.StatusCallback = "/status" }), wantErr: true},
		{name: "base URL without scheme", opts: with(func(o *TwilioOptions) { o.BaseURL = "127.0.0.1:4010" }), wantErr: true},
		{name: "base URL without host", opts: with(func(o *TwilioOptions) { o.BaseURL = "http:///twilio" }), wantErr: true},
		{name: "base URL with query", opts: with(func(o *TwilioOptions) { o.BaseURL = "http://127.0.0.1:4010?x=1" }), wantErr: true},
		{name: "negative timeout", opts: with(func(o *TwilioOptions) { o.Timeout = -time.Second }), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tw, err := NewTwilio(tt.opts)
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("NewTwilio() error = %v, want error: %t", err, tt.wantErr)
			}
			if err != nil {
				if tw != nil {
					t.Errorf("NewTwilio() = %+v with an error, want nil", tw)
				}
				return
			}
			if tw.account.timeout != tt.wantTimeout {
				t.Errorf("timeout = %v, want %v", tw.account.timeout, tt.wantTimeout)
			}
		})
	}
}
