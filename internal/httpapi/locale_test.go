package httpapi_test

import (
	"regexp"
	"testing"
)

// TestSendLocaleJSON: /otp/send's locale picks the SMS text as Verify's
// Locale does (guard/locale.go): the policy's template for the locale, in
// any case; none, otp.message.
func TestSendLocaleJSON(t *testing.T) {
	p := defaults()
	p.OTP.Messages = map[string]string{"pt-BR": "Seu código é {code}"}
	c, _ := miniCluster(t, 1, p)
	for _, tc := range []struct {
		phone, locale string
		want          *regexp.Regexp
	}{
		{"+447400100201", `"es"`, regexp.MustCompile(`^Tu código de verificación es \d{6}$`)},
		{"+447400100202", `"pt-br"`, regexp.MustCompile(`^Seu código é \d{6}$`)},
		{"+447400100203", `""`, regexp.MustCompile(`^Your verification code is \d{6}$`)},
	} {
		r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+tc.phone+`","locale":`+tc.locale+`}`)
		if r.Status != 200 {
			t.Fatalf("send with locale %s: %d %s", tc.locale, r.Status, r.Body)
		}
		sent := c.out.Sent()
		if last := sent[len(sent)-1]; last.To != tc.phone || !tc.want.MatchString(last.Body) {
			t.Errorf("locale %s: sent %q to %s, want %s", tc.locale, last.Body, last.To, tc.want)
		}
	}
}
