package sms

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	openapi "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/otpguard/otpguard/internal/guard"
)

var _ guard.Sender = (*WhatsApp)(nil)

// WhatsAppOptions configures a WhatsApp sender.
type WhatsAppOptions struct {
	// Account is the Twilio account, its base URL, timeout, transport and
	// status callback; its From and MessagingServiceSID are the SMS
	// sender's and are not used.
	Account TwilioOptions
	// From is the WhatsApp sender's number in E.164, without "whatsapp:".
	From string
	// ContentSID ("HX...") is an approved authentication template whose
	// variable {{1}} is the code.
	ContentSID string
}

// WhatsApp sends codes as WhatsApp authentication messages through
// Twilio's Messages API: From and To are "whatsapp:" addresses and the
// text is the approved template ContentSID with the code as its variable
// "1" (ContentVariables), since WhatsApp takes only templates for a
// business-initiated message. It is safe for concurrent use.
type WhatsApp struct {
	account    *twilioAccount
	from       string
	contentSID string
}

// whatsAppPrefix makes a number a WhatsApp address in Twilio's API.
const whatsAppPrefix = "whatsapp:"

// NewWhatsApp checks o and returns a WhatsApp sender, reporting every
// problem at once.
func NewWhatsApp(o WhatsAppOptions) (*WhatsApp, error) {
	account, errs := newTwilioAccount(o.Account)
	from := strings.TrimPrefix(o.From, whatsAppPrefix)
	if !e164Like(from) {
		errs = append(errs, fmt.Errorf("sms: whatsapp: from %q must be a number in E.164 (+ and digits)", o.From))
	}
	if !strings.HasPrefix(o.ContentSID, "HX") || !alphanumeric(o.ContentSID) {
		errs = append(errs, errors.New("sms: whatsapp: content SID must be \"HX\" followed by letters and digits"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &WhatsApp{account: account, from: whatsAppPrefix + from, contentSID: o.ContentSID}, nil
}

// whatsAppRefusals are the Twilio error codes that mean the number will
// not take a WhatsApp message: not a WhatsApp user (63003, 63024), not a
// valid number (21211), opted out (21610).
var whatsAppRefusals = map[int]bool{21211: true, 21610: true, 63003: true, 63024: true}

// Send asks Twilio to deliver m.Code in the template. A nil error means
// Twilio accepted (queued) the message; delivery is reported to the
// status callback, as an SMS's is.
func (w *WhatsApp) Send(ctx context.Context, m guard.Message) error {
	vars, err := json.Marshal(map[string]string{"1": m.Code})
	if err != nil {
		return unavailable(&NotSent{Err: fmt.Errorf("sms: whatsapp: content variables: %w", err)})
	}
	params := &openapi.CreateMessageParams{}
	params.SetTo(whatsAppPrefix + m.To).SetFrom(w.from).
		SetContentSid(w.contentSID).SetContentVariables(string(vars))
	if cb := w.account.statusCallback; cb != "" {
		params.SetStatusCallback(cb)
	}
	return w.account.call(ctx, "create whatsapp message", whatsAppRefusals, func(api *openapi.ApiService) error {
		_, err := api.CreateMessage(params)
		return err
	}, string(vars), m.Body, m.Code)
}

// e164Like reports whether s is '+' and 8 to 15 digits: a number as
// Twilio takes it for a sender.
func e164Like(s string) bool {
	if len(s) < 9 || len(s) > 16 || s[0] != '+' {
		return false
	}
	for _, r := range s[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
