package guard

import (
	"strings"
	"testing"
)

// TestMessageTemplate: a locale's own template, else its base language's,
// else otp.message; the built-in translations only while otp.message is
// the built-in one, and the policy's templates over them.
func TestMessageTemplate(t *testing.T) {
	policy := func(message string, messages map[string]string) OTPPolicy {
		return OTPPolicy{Message: message, Messages: messages}
	}
	const own = "Acme: your code is {code}. Never share it."
	for _, tc := range []struct {
		name   string
		policy OTPPolicy
		locale string
		want   string
	}{
		{"no locale", policy(DefaultMessage, nil), "", DefaultMessage},
		{"a built-in translation", policy(DefaultMessage, nil), "es", builtinMessages["es"]},
		{"a region falls back to its language", policy(DefaultMessage, nil), "pt-BR", builtinMessages["pt"]},
		{"a language without a template", policy(DefaultMessage, nil), "ja", DefaultMessage},
		{"a region of a language without one", policy(DefaultMessage, nil), "en-GB", DefaultMessage},
		{"the policy's template", policy(DefaultMessage, map[string]string{"es": "Código: {code}"}), "es", "Código: {code}"},
		{"the policy's region over the language", policy(DefaultMessage, map[string]string{"pt": "pt {code}", "pt-BR": "br {code}"}), "pt-BR", "br {code}"},
		{"the policy's language for a region", policy(DefaultMessage, map[string]string{"pt": "pt {code}"}), "pt-BR", "pt {code}"},
		{"the policy's region is not its language's", policy(DefaultMessage, map[string]string{"pt-BR": "br {code}"}), "pt", builtinMessages["pt"]},
		{"the policy's English", policy(DefaultMessage, map[string]string{"en": "Hi {code}"}), "en-GB", "Hi {code}"},
		{"an own message has no built-ins", policy(own, nil), "es", own},
		{"an own message with its own translation", policy(own, map[string]string{"fr": "Acme : {code}"}), "fr", "Acme : {code}"},
		{"an own message, another locale", policy(own, map[string]string{"fr": "Acme : {code}"}), "de", own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newMessages(tc.policy).template(tc.locale); got != tc.want {
				t.Errorf("template(%q) = %q, want %q", tc.locale, got, tc.want)
			}
		})
	}
}

// TestCanonicalLocale: Verify's locales in any case, spelt as Twilio
// spells them; anything else, a long value included, is not one.
func TestCanonicalLocale(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"es", "es", true},
		{"pt-BR", "pt-BR", true},
		{"pt-br", "pt-BR", true},
		{"ZH-hk", "zh-HK", true},
		{"en-GB", "en-GB", true},
		{"es-MX", "", false}, // not in Verify's list
		{"pt_BR", "", false},
		{"english", "", false},
		{"", "", false},
		{"es\x00", "", false},
		{"pt-BR-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "", false},
	} {
		got, ok := CanonicalLocale(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CanonicalLocale(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	for _, l := range supportedLocales {
		if _, ok := CanonicalLocale(l); !ok {
			t.Errorf("supported locale %q is not canonical", l)
		}
	}
	for l := range builtinMessages {
		if c, ok := CanonicalLocale(l); !ok || c != l || strings.Contains(l, "-") {
			t.Errorf("built-in translation %q: want a supported base language", l)
		}
	}
}

// TestPickByNumber: a send naming no locale gets the text of its number's
// country's language when there is one, else otp.message; a locale named
// wins; a deployment's own otp.message is never replaced by a built-in
// translation. The text says which locale it is in.
func TestPickByNumber(t *testing.T) {
	const own = "Acme: your code is {code}."
	def := newMessages(OTPPolicy{Message: DefaultMessage})
	mine := newMessages(OTPPolicy{Message: own, Messages: map[string]string{"nl": "Acme: uw code is {code}."}})
	for _, tc := range []struct {
		name           string
		m              messages
		locale, region string
		want           text
	}{
		{"Germany", def, "", "DE", text{builtinMessages["de"], "de"}},
		{"Austria", def, "", "AT", text{builtinMessages["de"], "de"}},
		{"Switzerland is German", def, "", "CH", text{builtinMessages["de"], "de"}},
		{"Mexico", def, "", "MX", text{builtinMessages["es"], "es"}},
		{"Brazil: pt-BR, pt's text", def, "", "BR", text{builtinMessages["pt"], "pt"}},
		{"Mozambique", def, "", "MZ", text{builtinMessages["pt"], "pt"}},
		{"Italy", def, "", "IT", text{builtinMessages["it"], "it"}},
		{"Réunion is France", def, "", "RE", text{builtinMessages["fr"], "fr"}},
		{"Belgium is Dutch: no built-in text", def, "", "BE", text{DefaultMessage, "en"}},
		{"the United States", def, "", "US", text{DefaultMessage, "en"}},
		{"a country not listed", def, "", "IN", text{DefaultMessage, "en"}},
		{"no country", def, "", "", text{DefaultMessage, "en"}},
		{"the locale named wins", def, "it", "DE", text{builtinMessages["it"], "it"}},
		{"an own message is not translated", mine, "", "DE", text{own, ""}},
		{"an own message's own translation", mine, "", "BE", text{"Acme: uw code is {code}.", "nl"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.pick(tc.locale, tc.region); got != tc.want {
				t.Errorf("pick(%q, %q) = %+v, want %+v", tc.locale, tc.region, got, tc.want)
			}
		})
	}
}

// TestCountryLocales: every language of the table is a supported locale,
// spelt as Twilio spells it, and every built-in text has a country.
func TestCountryLocales(t *testing.T) {
	has := map[string]bool{}
	for region, l := range countryLocales {
		if c, ok := CanonicalLocale(l); !ok || c != l {
			t.Errorf("%s: %q is not a supported locale as Twilio spells it", region, l)
		}
		if len(region) != 2 || strings.ToUpper(region) != region {
			t.Errorf("%q: want an ISO 3166-1 alpha-2 code", region)
		}
		has[strings.SplitN(l, "-", 2)[0]] = true
	}
	for l := range builtinMessages {
		if !has[l] {
			t.Errorf("the built-in %s text: no country speaks it", l)
		}
	}
}
