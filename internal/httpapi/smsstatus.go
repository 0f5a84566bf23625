package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/twilio/twilio-go/client"

	"github.com/otpguard/otpguard/internal/guard"
)

// StatusCallback is what POST /sms/status needs to check Twilio's
// signature: the URL Twilio was given (TWILIO_STATUS_CALLBACK_URL, exactly
// as configured: the signature covers it) and the account's auth token.
// Either empty: the route answers 404 (no callback is configured, e.g.
// OTPGUARD_SMS=console).
type StatusCallback struct {
	URL       string
	AuthToken string
}

// twilioStatuses are the message statuses Twilio reports; anything else
// is counted as "other", so a forged label cannot grow the metric.
var twilioStatuses = map[string]bool{
	"accepted": true, "scheduled": true, "queued": true, "sending": true, "sent": true,
	"delivered": true, "undelivered": true, "failed": true, "read": true,
	"partially_delivered": true, "canceled": true, "receiving": true, "received": true,
}

// smsStatus: POST /sms/status. Twilio's delivery status callback. No
// bearer key: the X-Twilio-Signature (HMAC-SHA1 of the callback URL and
// the sorted form parameters, keyed with the auth token) is the
// authentication; a missing or forged one is 403.
func (s *Server) smsStatus(c echo.Context) error {
	cb := s.statusCallback
	if cb.URL == "" || cb.AuthToken == "" || s.otp == nil {
		return guard.Errorf(guard.CodeNotFound, "no SMS status callback is configured (OTPGUARD_SMS=twilio and TWILIO_STATUS_CALLBACK_URL)")
	}
	r := c.Request()
	if err := r.ParseForm(); err != nil {
		return &guard.Error{Code: guard.CodeInvalidRequest, Message: "the body must be a form (application/x-www-form-urlencoded)", Err: err}
	}
	params := make(map[string]string, len(r.PostForm))
	for k, v := range r.PostForm {
		params[k] = v[0] // as twilio-go's ValidateBody: the first value of each key
	}
	sig := r.Header.Get("X-Twilio-Signature")
	v := client.NewRequestValidator(cb.AuthToken)
	if sig == "" || !v.Validate(cb.URL, params, sig) {
		return guard.Errorf(guard.CodeForbidden, "the X-Twilio-Signature does not match")
	}
	status := params["MessageStatus"]
	if status == "" {
		status = params["SmsStatus"]
	}
	if status == "" {
		return guard.Errorf(guard.CodeInvalidRequest, "MessageStatus is required")
	}
	label := status
	if !twilioStatuses[label] {
		label = "other"
	}
	s.abuseMetrics.SMSStatus(label)
	sid := params["MessageSid"]
	if sid == "" {
		sid = params["SmsSid"]
	}
	s.otp.RecordDelivery(r.Context(), guard.Delivery{MessageID: sid, To: params["To"], Status: label, ErrorCode: params["ErrorCode"]})
	return c.NoContent(http.StatusNoContent)
}
