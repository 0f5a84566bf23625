package httpapi

import (
	"net/http"
	"net/url"
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

// twilioStatuses are the message statuses Twilio reports; anything else
// is counted as "other", so a forged label cannot grow the metric.
var twilioStatuses = map[string]bool{
	"accepted": true, "scheduled": true, "queued": true, "sending": true, "sent": true,
	"delivered": true, "undelivered": true, "failed": true, "read": true,
	"partially_delivered": true, "canceled": true, "receiving": true, "received": true,
}

// smsStatusHandler is the handler of POST /sms/status.
type smsStatusHandler struct {
	live     *atomic.Pointer[Services]
	callback StatusCallback // nil: 404
	metrics  *metrics.Abuse
}

// smsStatus: POST /sms/status. Twilio's delivery status callback. No
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
	status := form.Get("MessageStatus")
	if status == "" {
		status = form.Get("SmsStatus")
	}
	if status == "" {
		return problem.Errorf(problem.CodeInvalidRequest, "MessageStatus is required")
	}
	label := status
	if !twilioStatuses[label] {
		label = "other"
	}
	sid := form.Get("MessageSid")
	if sid == "" {
		sid = form.Get("SmsSid")
	}
	// A replay (the same message and status, already recorded on any
	// instance) is answered as the first was, and counted nowhere.
	if h.live.Load().OTP.RecordDelivery(r.Context(), guard.Delivery{MessageID: sid, To: form.Get("To"), Status: label, ErrorCode: form.Get("ErrorCode")}) {
		h.metrics.SMSStatus(label)
	}
	return c.NoContent(http.StatusNoContent)
}
