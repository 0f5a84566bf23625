package guard

import "strings"

// A send that names no locale gets its SMS in the language of the
// number's country, as Twilio Verify does: countryLocales is a country's
// main language (the one most of its people read; for a country of two or
// three, the majority's), as a supported locale. A country not listed,
// and one whose language has no text (otp.messages, or the built-ins while
// otp.message is the built-in one), gets otp.message. A locale the
// request names always wins.
//
// Choices worth knowing (docs/verify.md, "Locale"): Switzerland is de,
// Belgium nl, Canada and the United States en, Brazil pt-BR (its text is
// pt's unless otp.messages has pt-BR), Hong Kong zh-HK; the francophone
// countries of Africa where French is the one official language are fr.
// India, the Philippines, South Africa and Luxembourg are not listed: no
// one language is read by most of their people among Verify's locales.
var countryLocales = map[string]string{
	// German
	"DE": "de", "AT": "de", "CH": "de", "LI": "de",
	// French, with France's overseas departments and collectivities
	"FR": "fr", "MC": "fr", "RE": "fr", "GP": "fr", "MQ": "fr", "GF": "fr", "YT": "fr", "PM": "fr",
	"BL": "fr", "MF": "fr", "NC": "fr", "PF": "fr", "WF": "fr",
	"SN": "fr", "CI": "fr", "BJ": "fr", "TG": "fr", "GA": "fr", "CG": "fr", "CD": "fr", "GN": "fr",
	"BF": "fr", "NE": "fr",
	// Spanish
	"ES": "es", "MX": "es", "AR": "es", "CO": "es", "CL": "es", "PE": "es", "VE": "es", "EC": "es",
	"GT": "es", "CU": "es", "BO": "es", "DO": "es", "HN": "es", "PY": "es", "SV": "es", "NI": "es",
	"CR": "es", "PA": "es", "UY": "es", "PR": "es", "GQ": "es",
	// Italian
	"IT": "it", "SM": "it", "VA": "it",
	// Portuguese
	"PT": "pt", "BR": "pt-BR", "AO": "pt", "MZ": "pt", "CV": "pt", "GW": "pt", "ST": "pt", "TL": "pt",
	// Dutch
	"NL": "nl", "BE": "nl", "SR": "nl",
	// The other languages of Verify's list, where a deployment's
	// otp.messages may have a text.
	"JP": "ja", "KR": "ko", "CN": "zh-CN", "HK": "zh-HK", "RU": "ru", "PL": "pl", "TR": "tr", "UA": "uk",
	"CZ": "cs", "SK": "sk", "HU": "hu", "RO": "ro", "MD": "ro", "GR": "el", "CY": "el", "SE": "sv",
	"DK": "da", "NO": "nb", "FI": "fi", "EE": "et", "LT": "lt", "HR": "hr", "ID": "id", "MY": "ms",
	"TH": "th", "VN": "vi", "IL": "he",
	"SA": "ar", "AE": "ar", "EG": "ar", "IQ": "ar", "JO": "ar", "KW": "ar", "QA": "ar", "BH": "ar",
	"OM": "ar", "YE": "ar", "LB": "ar", "SY": "ar", "LY": "ar", "TN": "ar", "DZ": "ar", "MA": "ar",
	"SD": "ar",
}

// CountryLocale returns the locale of region's main language (an ISO
// 3166-1 alpha-2 code, as Phone.Region), and whether the table names one.
func CountryLocale(region string) (string, bool) {
	l, ok := countryLocales[region]
	return l, ok
}

// text is an SMS's template and the locale whose text it is: the locale
// (or its base language) whose template was found, "en" for the built-in
// otp.message, "" for a deployment's own otp.message (its language is
// its own).
type text struct {
	template, locale string
}

// text is the text for locale (canonical, "" none): its own, its base
// language's ("pt" of "pt-BR"), else otp.message.
func (m messages) text(locale string) text {
	if t, ok := m.byLocale[locale]; ok && locale != "" {
		return text{t, locale}
	}
	if lang, _, region := strings.Cut(locale, "-"); region {
		if t, ok := m.byLocale[lang]; ok {
			return text{t, lang}
		}
	}
	if m.fallback == DefaultMessage {
		return text{m.fallback, "en"}
	}
	return text{m.fallback, ""}
}

// pick is a send's text: of the locale it names, else of the number's
// country's language (numberlocale.go), as Verify chooses.
func (m messages) pick(locale, region string) text {
	if locale == "" {
		locale, _ = CountryLocale(region)
	}
	return m.text(locale)
}
