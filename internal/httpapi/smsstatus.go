package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/problem"
)

// StatusCallback checks that a POST /sms/status comes from the SMS
// provider: sms.TwilioCallback checks Twilio's X-Twilio-Signature against
// TWILIO_STATUS_CALLBACK_URL and the auth token. Nil: the route answers
// 404 (no callback is configured, e.g. OTPGUARD_SMS=console).
type StatusCallback interface {
	// Verify reports whether the request's header signs form, its
	// posted body.
	Verify(header http.Header, form url.Values) bool
}

// twilioStatuses are the message and call statuses Twilio reports;
// anything else is counted as "other", so a forged label cannot grow the
// metric.
var twilioStatuses = map[string]bool{
	"accepted": true, "scheduled": true, "queued": true, "sending": true, "sent": true,
	"delivered": true, "undelivered": true, "failed": true, "read": true,
	"partially_delivered": true, "canceled": true, "receiving": true, "received": true,
	// a call's (CallStatus)
	"initiated": true, "ringing": true, "in-progress": true, "completed": true, "busy": true, "no-answer": true,
}

// statusReport reads one report of a status callback: a message's (SMS
// or WhatsApp, MessageStatus; SmsStatus of older callbacks) or a call's
// (CallStatus). A WhatsApp report's To is a "whatsapp:" address; the
// number is what is recorded, and the channel is told by the address
// and by a call's CallSid.
func statusReport(form url.Values) guard.Delivery {
	first := func(names ...string) string {
		for _, n := range names {
			if v := form.Get(n); v != "" {
				return v
			}
		}
		return ""
	}
	to, whatsapp := strings.CutPrefix(form.Get("To"), "whatsapp:")
	channel := guard.ChannelSMS
	switch {
	case whatsapp:
		channel = guard.ChannelWhatsApp
	case form.Get("MessageSid") == "" && form.Get("SmsSid") == "" && form.Get("CallSid") != "":
		channel = guard.ChannelCall
	}
	return guard.Delivery{
		MessageID: first("MessageSid", "SmsSid", "CallSid"),
		To:        to,
		Status:    first("MessageStatus", "SmsStatus", "CallStatus"),
		ErrorCode: form.Get("ErrorCode"),
		Channel:   channel,
	}
}

// smsStatusHandler is the handler of POST /sms/status.
type smsStatusHandler struct {
	live     *atomic.Pointer[Services]
	callback StatusCallback // nil: 404
	metrics  *metrics.Abuse
}

// smsStatus: POST /sms/status. Twilio's delivery status callback, of
// every channel's messages and calls (statusReport). No
// bearer key: the X-Twilio-Signature (HMAC-SHA1 of the callback URL and
// the sorted form parameters, keyed with the auth token) is the
// authentication; a missing or forged one is 403.
func (h *smsStatusHandler) smsStatus(c echo.Context) error {
	if h.callback == nil || h.live.Load().OTP == nil {
		return problem.Errorf(problem.CodeNotFound, "no SMS status callback is configured (OTPGUARD_SMS=twilio and TWILIO_STATUS_CALLBACK_URL)")
	}
	r := c.Request()
	if err := r.ParseForm(); err != nil {
		return &problem.Error{Code: problem.CodeInvalidRequest, Message: "the body must be a form (application/x-www-form-urlencoded)", Err: err}
	}
	form := r.PostForm
	if !h.callback.Verify(r.Header, form) {
		return problem.Errorf(problem.CodeForbidden, "the X-Twilio-Signature does not match")
	}
	d := statusReport(form)
	if d.Status == "" {
		return problem.Errorf(problem.CodeInvalidRequest, "MessageStatus (or a call's CallStatus) is required")
	}
	if !twilioStatuses[d.Status] {
		d.Status = "other"
	}
	// A replay (the same message and status, already recorded on any
	// instance) is answered as the first was, and counted nowhere.
	if h.live.Load().OTP.RecordDelivery(r.Context(), d) {
		h.metrics.SMSStatus(d.Status, d.Channel)
	}
	return c.NoContent(http.StatusNoContent)
}
