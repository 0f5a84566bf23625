package sms

import (
	"net/http"
	"net/url"

	"github.com/twilio/twilio-go/client"
)

// TwilioCallback checks that a status callback (POST /sms/status) comes
// from Twilio. Twilio signs each one with the account's auth token, and
// the signature covers the callback URL it was given, so URL must be
// TWILIO_STATUS_CALLBACK_URL exactly as configured.
type TwilioCallback struct {
	URL       string
	AuthToken string
}

// twilioSignatureHeader carries Twilio's signature of a callback.
const twilioSignatureHeader = "X-Twilio-Signature"

// Verify reports whether header's X-Twilio-Signature is Twilio's signature
// of form posted to c.URL: base64(HMAC-SHA1(auth token, URL + each name
// and value, names sorted)), checked by twilio-go's RequestValidator. A
// missing signature, or a callback without its URL or token, never
// verifies.
func (c TwilioCallback) Verify(header http.Header, form url.Values) bool {
	sig := header.Get(twilioSignatureHeader)
	if sig == "" || c.URL == "" || c.AuthToken == "" {
		return false
	}
	params := make(map[string]string, len(form))
	for k, v := range form {
		if len(v) > 0 {
			params[k] = v[0] // as twilio-go's ValidateBody: the first value of each key
		}
	}
	v := client.NewRequestValidator(c.AuthToken)
	return v.Validate(c.URL, params, sig)
}
