package verifyapi

import (
	"cmp"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The answers' shapes are Verify v2's (Twilio's OpenAPI description of
// it, pinned in testdata/, holds them): every field Verify documents is
// present, null where otpguard has nothing to say (amount, payee, sna).

// dateFormat is Verify's: ISO 8601 in UTC, to the second.
const dateFormat = "2006-01-02T15:04:05Z"

// verificationJSON is a Verification resource.
type verificationJSON struct {
	SID              *string       `json:"sid"`
	ServiceSID       string        `json:"service_sid"`
	AccountSID       string        `json:"account_sid"`
	To               string        `json:"to"`
	Channel          string        `json:"channel"`
	Status           string        `json:"status"`
	Valid            bool          `json:"valid"`
	Lookup           struct{}      `json:"lookup"`
	Amount           *string       `json:"amount"`
	Payee            *string       `json:"payee"`
	SendCodeAttempts []sendAttempt `json:"send_code_attempts"`
	DateCreated      string        `json:"date_created"`
	DateUpdated      string        `json:"date_updated"`
	SNA              *struct{}     `json:"sna"`
	URL              *string       `json:"url"`
	// Locale is otpguard's, beside Twilio's resource: on a create, the
	// language of the SMS sent (the Locale asked for, else the number's
	// country's; guard.SendResult.Locale), absent when it was a
	// deployment's own otp.message, and on a read.
	Locale string `json:"locale,omitempty"`
}

// sendAttempt is one of send_code_attempts: otpguard makes one per
// verification.
type sendAttempt struct {
	Channel string `json:"channel"`
	Time    string `json:"time"`
}

// checkJSON is a VerificationCheck resource.
type checkJSON struct {
	SID                   *string  `json:"sid"`
	ServiceSID            string   `json:"service_sid"`
	AccountSID            string   `json:"account_sid"`
	To                    string   `json:"to"`
	Channel               string   `json:"channel"`
	Status                string   `json:"status"`
	Valid                 bool     `json:"valid"`
	Amount                *string  `json:"amount"`
	Payee                 *string  `json:"payee"`
	DateCreated           *string  `json:"date_created"`
	DateUpdated           *string  `json:"date_updated"`
	SNAAttemptsErrorCodes []string `json:"sna_attempts_error_codes"`
}

// serviceJSON is a Service resource: what otpguard's service is, every
// feature it does not have false or null.
type serviceJSON struct {
	SID                            string            `json:"sid"`
	AccountSID                     string            `json:"account_sid"`
	FriendlyName                   string            `json:"friendly_name"`
	CodeLength                     int               `json:"code_length"`
	LookupEnabled                  bool              `json:"lookup_enabled"`
	PSD2Enabled                    bool              `json:"psd2_enabled"`
	SkipSMSToLandlines             bool              `json:"skip_sms_to_landlines"`
	DTMFInputRequired              bool              `json:"dtmf_input_required"`
	TTSName                        *string           `json:"tts_name"`
	DoNotShareWarningEnabled       bool              `json:"do_not_share_warning_enabled"`
	CustomCodeEnabled              bool              `json:"custom_code_enabled"`
	Push                           *struct{}         `json:"push"`
	TOTP                           *struct{}         `json:"totp"`
	DefaultTemplateSID             *string           `json:"default_template_sid"`
	WhatsApp                       *struct{}         `json:"whatsapp"`
	Passkeys                       *struct{}         `json:"passkeys"`
	VerifyEventSubscriptionEnabled bool              `json:"verify_event_subscription_enabled"`
	DateCreated                    *string           `json:"date_created"`
	DateUpdated                    *string           `json:"date_updated"`
	URL                            string            `json:"url"`
	Links                          map[string]string `json:"links"`
}

func date(t time.Time) string { return t.UTC().Format(dateFormat) }

func datePtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	d := date(t)
	return &d
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// newVerification is the record v of tenant t as Verify shows it; base
// is the scheme and host the request came to, for url.
func newVerification(t *Tenant, v guard.Verification, base string) verificationJSON {
	ch := channelOf(v)
	out := verificationJSON{SID: strPtr(v.ID), ServiceSID: t.SID, AccountSID: t.AccountSID, To: v.Phone,
		Channel: ch, Status: string(v.Status), Valid: v.Status == guard.StatusApproved,
		SendCodeAttempts: []sendAttempt{{Channel: ch, Time: date(v.CreatedAt)}},
		DateCreated:      date(v.CreatedAt), DateUpdated: date(v.UpdatedAt)}
	if v.ID != "" {
		u := base + "/v2/Services/" + t.SID + "/Verifications/" + v.ID
		out.URL = &u
	}
	return out
}

// channelOf is the channel v's code went by, as its record keeps it: SMS
// when it says none (a code sent before records kept their channel, or
// a stateless code, which has no record).
func channelOf(v guard.Verification) string { return cmp.Or(v.Channel, guard.ChannelSMS) }

// newCheck is a check's answer from the verification v it checked.
func newCheck(t *Tenant, v guard.Verification) checkJSON {
	return checkJSON{SID: strPtr(v.ID), ServiceSID: t.SID, AccountSID: t.AccountSID, To: v.Phone,
		Channel: channelOf(v), Status: string(v.Status), Valid: v.Status == guard.StatusApproved,
		DateCreated: datePtr(v.CreatedAt), DateUpdated: datePtr(v.UpdatedAt), SNAAttemptsErrorCodes: []string{}}
}

// newService is tenant t as a Service resource.
func newService(t *Tenant, codeLength int, base string) serviceJSON {
	u := base + "/v2/Services/" + t.SID
	return serviceJSON{SID: t.SID, AccountSID: t.AccountSID, FriendlyName: t.FriendlyName, CodeLength: codeLength,
		URL: u, Links: map[string]string{"verifications": u + "/Verifications",
			"verification_checks": u + "/VerificationCheck"}}
}
