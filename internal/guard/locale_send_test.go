package guard_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestSendLocale: a send's locale picks the text the provider gets, with
// the code in it; a locale Verify does not list is refused before the
// number's limits are spent, and nothing is sent.
func TestSendLocale(t *testing.T) {
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.Messages = map[string]string{"es": "Tu código es {code}"}
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	st := guardtest.NewOutageStore()
	box := &guardtest.Outbox{}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, HMACKey: outageHMACKey, Sender: box})
	for _, tc := range []struct {
		phone, locale string
		want          *regexp.Regexp
	}{
		{"+14155550170", "", regexp.MustCompile(`^Your verification code is \d{6}$`)},
		{"+14155550171", "es", regexp.MustCompile(`^Tu código es \d{6}$`)},
		{"+14155550172", "ES", regexp.MustCompile(`^Tu código es \d{6}$`)},
		{"+14155550173", "fr", regexp.MustCompile(`^Votre code de vérification est \d{6}$`)},
		{"+14155550174", "pt-br", regexp.MustCompile(`^O seu código de verificação é \d{6}$`)},
		{"+14155550175", "ja", regexp.MustCompile(`^Your verification code is \d{6}$`)},
	} {
		if _, err := otp.Send(context.Background(), guard.SendRequest{Phone: tc.phone, Locale: tc.locale}); err != nil {
			t.Fatalf("send in %q: %v", tc.locale, err)
		}
		sent := box.Sent()
		if last := sent[len(sent)-1]; last.To != tc.phone || !tc.want.MatchString(last.Body) {
			t.Errorf("locale %q: sent %q to %s, want %s", tc.locale, last.Body, last.To, tc.want)
		}
	}

	const phone = "+14155550179"
	for _, locale := range []string{"es-MX", "klingon", "pt_BR", string(make([]byte, 5000))} {
		_, err := otp.Send(context.Background(), guard.SendRequest{Phone: phone, Locale: locale})
		wantCode(t, err, problem.CodeInvalidRequest)
	}
	for _, k := range guard.PhoneCounterKeys(phone) {
		if got := st.Count(k); got != 0 {
			t.Errorf("%s = %d after refused locales, want 0", k.Name, got)
		}
	}
	if got := box.SentTo(phone); got != 0 {
		t.Errorf("%d SMS to %s after refused locales, want none", got, phone)
	}
}

// TestMessagesValidation: otp.messages is held to otp.message's rules,
// and its keys to Verify's locales as Twilio spells them, each problem
// naming its field.
func TestMessagesValidation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		messages map[string]string
		field    string
	}{
		{"no {code}", map[string]string{"es": "Tu código"}, "otp.messages.es"},
		{"too long", map[string]string{"fr": "{code}" + string(make([]byte, 300))}, "otp.messages.fr"},
		{"not a locale", map[string]string{"xx": "{code}"}, "otp.messages.xx"},
		{"a locale Verify does not list", map[string]string{"es-MX": "{code}"}, "otp.messages.es-MX"},
		{"a locale spelt otherwise", map[string]string{"pt-br": "{code}"}, "otp.messages.pt-br"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			p.OTP.Messages = tc.messages
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("Validate: %v, want an error naming %s", err, tc.field)
			}
		})
	}
	p := guard.DefaultPolicies()
	p.OTP.Messages = map[string]string{"es": "Tu código es {code}", "pt-BR": "Seu código é {code}", "zh-HK": "{code}"}
	if err := p.Validate(); err != nil {
		t.Errorf("good messages: %v", err)
	}
}
