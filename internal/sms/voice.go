package sms

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"

	openapi "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/otpguard/otpguard/internal/guard"
)

var _ guard.Sender = (*Voice)(nil)

// VoiceOptions configures a voice sender.
type VoiceOptions struct {
	// Account is the Twilio account, as WhatsAppOptions' is.
	Account TwilioOptions
	// From is the caller: a Twilio voice number in E.164.
	From string
}

// Voice reads codes out in a phone call through Twilio's Calls API: the
// call's TwiML (the Twiml parameter, no webhook to host) says the text
// with the code's digits spaced, so that <Say> reads them one by one, and
// says it twice. It is safe for concurrent use.
type Voice struct {
	account *twilioAccount
	from    string
}

// NewVoice checks o and returns a voice sender, reporting every problem
// at once.
func NewVoice(o VoiceOptions) (*Voice, error) {
	account, errs := newTwilioAccount(o.Account)
	if !e164Like(o.From) {
		errs = append(errs, fmt.Errorf("sms: voice: from %q must be a number in E.164 (+ and digits)", o.From))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Voice{account: account, from: o.From}, nil
}

// voiceRefusals are the Twilio error codes that mean the number cannot be
// called: not a valid number (13223, 13224, 21211), a region the account
// may not call (21215), a number Twilio blocks (21216).
var voiceRefusals = map[int]bool{13223: true, 13224: true, 21211: true, 21215: true, 21216: true}

// Send asks Twilio to place the call. A nil error means Twilio accepted
// (queued) it, not that anyone answered; how it ended is reported to the
// status callback (its CallStatus).
func (v *Voice) Send(ctx context.Context, m guard.Message) error {
	spoken := spokenText(m.Body, m.Code)
	doc, err := callTwiML(spoken, SayLanguage(m.Locale))
	if err != nil {
		return unavailable(&NotSent{Err: fmt.Errorf("sms: voice: twiml: %w", err)})
	}
	params := &openapi.CreateCallParams{}
	params.SetTo(m.To).SetFrom(v.from).SetTwiml(doc)
	if cb := v.account.statusCallback; cb != "" {
		params.SetStatusCallback(cb)
	}
	return v.account.call(ctx, "create call", voiceRefusals, func(api *openapi.ApiService) error {
		_, err := api.CreateCall(params)
		return err
	}, doc, spoken, m.Body, spacedDigits(m.Code), m.Code)
}

// spokenText is body with every occurrence of code spaced into its digits
// ("1, 2, 3"): <Say> reads "123" as a number, "1, 2, 3" digit by digit.
func spokenText(body, code string) string {
	if code == "" {
		return body
	}
	return strings.ReplaceAll(body, code, spacedDigits(code))
}

// spacedDigits is code's characters joined by ", ".
func spacedDigits(code string) string {
	return strings.Join(strings.Split(code, ""), ", ")
}

// The TwiML of a call: the text said, a pause, and said again.
type (
	twimlResponse struct {
		XMLName xml.Name `xml:"Response"`
		Verbs   []any
	}
	twimlSay struct {
		XMLName  xml.Name `xml:"Say"`
		Language string   `xml:"language,attr"`
		Text     string   `xml:",chardata"`
	}
	twimlPause struct {
		XMLName xml.Name `xml:"Pause"`
		Length  int      `xml:"length,attr"`
	}
)

// callTwiML is the TwiML document that says text twice in language,
// escaped by encoding/xml: the text is the policy's, never markup.
func callTwiML(text, language string) (string, error) {
	say := twimlSay{Language: language, Text: text}
	out, err := xml.Marshal(twimlResponse{Verbs: []any{say, twimlPause{Length: 1}, say}})
	if err != nil {
		return "", err
	}
	return xml.Header + string(out), nil
}

// defaultSayLanguage is the voice of a locale <Say> has none for.
const defaultSayLanguage = "en-US"

// sayLanguages maps the send locales (guard.SupportedLocales) whose
// language Twilio's <Say> speaks to its language attribute: a region
// where the locale names one, else the language's main one
// (https://www.twilio.com/docs/voice/twiml/say#attributes-language).
var sayLanguages = map[string]string{
	"ca": "ca-ES", "da": "da-DK", "de": "de-DE", "en": "en-US", "en-GB": "en-GB", "es": "es-ES",
	"fi": "fi-FI", "fr": "fr-FR", "it": "it-IT", "ja": "ja-JP", "ko": "ko-KR", "nb": "nb-NO",
	"nl": "nl-NL", "pl": "pl-PL", "pt": "pt-PT", "pt-BR": "pt-BR", "ru": "ru-RU", "sv": "sv-SE",
	"zh": "zh-CN", "zh-CN": "zh-CN", "zh-HK": "zh-HK",
}

// SayLanguage is the <Say> language of a send's locale (canonical, ""
// none): its own when <Say> speaks it, else en-US.
func SayLanguage(locale string) string {
	if l, ok := sayLanguages[locale]; ok {
		return l
	}
	return defaultSayLanguage
}
