package guard

import (
	"strings"

	"github.com/otpguard/otpguard/internal/problem"
)

// A send may ask for its SMS in a language: Verify's Locale, /otp/send's
// locale. The text is the policy's template for that locale (otp.messages),
// else for its base language (pt-BR -> pt), else otp.message (the
// courier's choice, delivery.go). Locales are the ones Twilio Verify
// lists, so that an app written against Verify sends nothing otpguard
// refuses and Verify would take (docs/verify.md, "Locale").

// supportedLocales are the locales Twilio Verify documents for its SMS
// template (https://www.twilio.com/docs/verify/supported-languages), as
// Twilio spells them: its older list and its newer one together, so a
// value either accepted is accepted here.
var supportedLocales = []string{
	"af", "ar", "ca", "cs", "da", "de", "el", "en", "en-GB", "es", "et", "fi", "fr", "he", "hi", "hr", "hu",
	"id", "it", "ja", "kn", "ko", "lt", "mr", "ms", "nb", "nl", "pl", "pt", "pt-BR", "ro", "ru", "sk", "sv",
	"te", "th", "tl", "tr", "uk", "vi", "zh", "zh-CN", "zh-HK",
}

// maxLocale bounds the locale a request may name: the longest supported
// one is 5 bytes; a longer value is refused without being echoed.
const maxLocale = 16

// SupportedLocales are the locales a send may name, as Twilio spells
// them.
func SupportedLocales() []string { return append([]string(nil), supportedLocales...) }

// CanonicalLocale returns the supported locale s names, spelt as Twilio
// spells it ("pt-br" -> "pt-BR": language tags are case-insensitive), and
// whether s names one.
func CanonicalLocale(s string) (string, bool) {
	if len(s) > maxLocale {
		return "", false
	}
	for _, l := range supportedLocales {
		if strings.EqualFold(l, s) {
			return l, true
		}
	}
	return "", false
}

// LocaleProblem is what a refusal of locale says, naming the parameter
// param ("locale" in JSON, "Locale" on the Verify routes).
func LocaleProblem(param, locale string) *problem.Error {
	if len(locale) > maxLocale {
		return problem.Errorf(problem.CodeInvalidRequest, "%s is longer than %d bytes: use one of %s, or leave it out",
			param, maxLocale, strings.Join(supportedLocales, ", "))
	}
	return problem.Errorf(problem.CodeInvalidRequest, "%s %q is not a supported locale: use one of %s, or leave it out",
		param, locale, strings.Join(supportedLocales, ", "))
}

// DefaultMessage is otp.message when the policy file says nothing.
const DefaultMessage = "Your verification code is {code}"

// builtinMessages are translations of DefaultMessage, in force only while
// otp.message is DefaultMessage: a deployment that wrote its own message
// (its name, a warning) gets its own words in every locale it has not
// translated, never a translation of ours that drops them. Base languages
// only, so that a policy's template for a language is never passed over
// for a built-in one of its region.
var builtinMessages = map[string]string{
	"de": "Ihr Bestätigungscode lautet {code}",
	"es": "Tu código de verificación es {code}",
	"fr": "Votre code de vérification est {code}",
	"it": "Il tuo codice di verifica è {code}",
	"pt": "O seu código de verificação é {code}",
}
