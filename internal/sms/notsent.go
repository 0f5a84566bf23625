package sms

import (
	"errors"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twilio/twilio-go/client"

	"github.com/otpguard/otpguard/internal/guard"
)

// NotSent is the cause of a Send error when the provider surely did not
// take the message (guard.ErrNotSent, which it wraps): the number's next
// try is given back. Wait is the provider's Retry-After, zero when it sent
// none (guard.ProviderWait).
type NotSent struct {
	Wait time.Duration
	Err  error // the cause, fit for a log
}

var _ guard.ProviderWait = (*NotSent)(nil)

func (e *NotSent) Error() string { return e.Err.Error() + " (" + guard.ErrNotSent.Error() + ")" }

// Unwrap is the cause and guard.ErrNotSent.
func (e *NotSent) Unwrap() []error { return []error{e.Err, guard.ErrNotSent} }

// ProviderWait implements guard.ProviderWait.
func (e *NotSent) ProviderWait() time.Duration { return e.Wait }

// exchange is what one Send saw of its HTTP call: whether the request was
// written in full, and the answer's status and Retry-After. twilio-go
// keeps neither (it returns the decoded error body or the transport's
// error), and they are what tells a message Twilio surely did not take
// from one that may have left.
type exchange struct {
	wrote      atomic.Bool // set by the transport's writer, on its own goroutine
	status     int         // 0: no answer; set on the caller's goroutine, as RoundTrip returns
	retryAfter string
}

// trace records the end of the request's write.
func (x *exchange) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			x.wrote.Store(true)
		}
	}}
}

// answered records the answer's status line and Retry-After.
func (x *exchange) answered(r *http.Response) {
	x.status, x.retryAfter = r.StatusCode, r.Header.Get("Retry-After")
}

// notSent reports whether err, the failure of the exchange x, proves the
// message was not taken:
//   - a 4xx answer: the request was refused (Twilio's rate limit, bad
//     credentials, a sender it does not know...);
//   - Twilio's own error answer (its JSON error body) with a 5xx: Twilio
//     answers so when it did not create the message;
//   - no answer, and the request never written in full (refused, a DNS or
//     TLS failure, a deadline met before it left): Twilio cannot act on
//     part of a request;
//   - no answer, and the connection reset by the peer: Twilio answers
//     every request it takes, a created message with 201.
//
// Anything else may hide a message that left: a timeout or a close after
// the request was written, a gateway's 5xx page (its upstream may have
// taken the request), a 2xx that cannot be read.
func notSent(err error, x *exchange) bool {
	var rest *client.TwilioRestError
	switch {
	case x.status >= 400 && x.status < 500:
		return true
	case x.status >= 500:
		return errors.As(err, &rest)
	case x.status != 0:
		return false
	case !x.wrote.Load():
		return true
	}
	return errors.Is(err, syscall.ECONNRESET)
}

// providerWait reads a Retry-After: delay seconds or an HTTP date (RFC
// 9110, 10.2.3). Zero for none, for one that cannot be read, or for a
// date past.
func providerWait(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 || s > int64(time.Duration(1<<63-1)/time.Second) {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}
