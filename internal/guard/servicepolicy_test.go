package guard_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

const (
	overlaySID = "VA0123456789abcdef0123456789abcdef"
	plainSID   = "VAfedcba9876543210fedcba9876543210"
)

// overlayService is a service of its own (not the default) with otp.
func overlayService(sid string, otp *guard.ServicePolicy) guard.Service {
	return guard.Service{SID: sid, AccountSID: "AC0123456789abcdef0123456789abcdef",
		Credentials: []guard.ServiceCredential{{SID: "SK0123456789abcdef0123456789abcdef", SecretFile: "/s"}}, OTP: otp}
}

// newOverlayOTP is an OTP service of the default policy (no cooldown)
// changed by edit, its services those given, offering WhatsApp beside
// SMS, on an in-memory store.
func newOverlayOTP(t *testing.T, edit func(p *guard.OTPPolicy), services ...guard.Service) (*guard.OTP, *guardtest.OutageStore, *guardtest.Outbox) {
	t.Helper()
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	if edit != nil {
		edit(&p.OTP)
	}
	p.Services = services
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	st, box := guardtest.NewOutageStore(), &guardtest.Outbox{}
	return guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Services: p.Services, Counter: st, Codes: st, HMACKey: outageHMACKey,
		Sender: box, Channels: []string{guard.ChannelWhatsApp}}), st, box
}

// TestServicePolicyCode: a service's code_length, code_ttl, message and
// max_verify_attempts are its sends' and verifies'; the default service
// and a service without an otp: block keep the deployment's.
func TestServicePolicyCode(t *testing.T) {
	otp, _, box := newOverlayOTP(t, nil,
		overlayService(overlaySID, &guard.ServicePolicy{CodeLength: 8, CodeTTL: 10 * time.Minute, MaxVerifyAttempts: 2,
			Message: "Shop: {code}"}),
		overlayService(plainSID, nil))
	ctx := context.Background()
	for _, tc := range []struct {
		name, service, phone string
		body                 *regexp.Regexp
		ttl                  time.Duration
	}{
		{"the default service", guard.DefaultService, "+14155550180", regexp.MustCompile(`^Your verification code is \d{6}$`), 5 * time.Minute},
		{"a service without a policy", plainSID, "+14155550181", regexp.MustCompile(`^Your verification code is \d{6}$`), 5 * time.Minute},
		{"a service with a policy", overlaySID, "+14155550182", regexp.MustCompile(`^Shop: \d{8}$`), 10 * time.Minute},
		// Its own message: none of the built-in translations of the
		// deployment's text speaks for it.
		{"a service with a policy, in French", overlaySID, "+14155550183", regexp.MustCompile(`^Shop: \d{8}$`), 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locale := ""
			if strings.Contains(tc.name, "French") {
				locale = "fr"
			}
			res, err := otp.Send(ctx, guard.SendRequest{Phone: tc.phone, Service: tc.service, Locale: locale})
			if err != nil {
				t.Fatal(err)
			}
			sent := box.Sent()
			if body := sent[len(sent)-1].Body; !tc.body.MatchString(body) {
				t.Errorf("sent %q, want %s", body, tc.body)
			}
			if res.ExpiresIn != tc.ttl {
				t.Errorf("expires in %s, want %s", res.ExpiresIn, tc.ttl)
			}
			if got, want := otp.CodeLength(tc.service), len(box.Code(tc.phone)); got != want {
				t.Errorf("CodeLength(%q) = %d, the code sent has %d digits", tc.service, got, want)
			}
		})
	}

	// A verify of the service is held to its length and its guesses.
	const phone = "+14155550182"
	code := box.Code(phone)
	_, err := otp.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code[:6], Service: overlaySID})
	wantCode(t, err, problem.CodeInvalidCode)
	_, err = otp.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: wrongCode(code), Service: overlaySID})
	var pe *problem.Error
	if !errors.As(err, &pe) || pe.Code != problem.CodeWrongCode || pe.AttemptsLeft == nil || *pe.AttemptsLeft != 1 {
		t.Fatalf("a wrong guess at the service's code: %v, want wrong_code with 1 attempt left (max_verify_attempts 2)", err)
	}
	if _, err := otp.Verify(ctx, guard.VerifyRequest{Phone: phone, Code: code, Service: overlaySID}); err != nil {
		t.Fatalf("the right 8 digits: %v", err)
	}
	// The default service's verify is still 6 digits.
	_, err = otp.Verify(ctx, guard.VerifyRequest{Phone: "+14155550180", Code: "12345678"})
	wantCode(t, err, problem.CodeInvalidCode)
}

// wrongCode is a code of code's length that is not code.
func wrongCode(code string) string {
	if code[0] == '0' {
		return "1" + code[1:]
	}
	return "0" + code[1:]
}

// TestServicePolicyLimits: a service's per_phone and cooldown are what its
// sends meet, on its own counters of the number; another service's sends
// meet the deployment's.
func TestServicePolicyLimits(t *testing.T) {
	cd := time.Duration(0)
	otp, st, _ := newOverlayOTP(t, func(p *guard.OTPPolicy) { p.Cooldown = 30 * time.Second },
		overlayService(overlaySID, &guard.ServicePolicy{PerPhone: guard.Window{Limit: 2, Window: time.Hour}, Cooldown: &cd}))
	ctx := context.Background()

	const phone = "+14155550190"
	for i := range 2 { // no cooldown of its own: back to back
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: phone, Service: overlaySID}); err != nil {
			t.Fatalf("send %d of 2: %v", i+1, err)
		}
	}
	_, err := otp.Send(ctx, guard.SendRequest{Phone: phone, Service: overlaySID})
	wantCode(t, err, problem.CodePhoneRateLimited)
	if got := st.Count(guard.PhoneCounterKeys(phone, overlaySID)[5]); got != 3 {
		t.Errorf("the service's sends counter of the number = %d, want 3 (2 sent, and the refused attempt kept)", got)
	}
	// The default service's counters of the number saw none of them.
	if got := st.Count(guard.PhoneCounterKeys(phone)[1]); got != 0 {
		t.Errorf("the default service's sends counter of the number = %d, want 0", got)
	}

	// The default service: the deployment's cooldown (30s) and per_phone (3).
	const other = "+14155550191"
	if _, err := otp.Send(ctx, guard.SendRequest{Phone: other}); err != nil {
		t.Fatal(err)
	}
	_, err = otp.Send(ctx, guard.SendRequest{Phone: other})
	wantCode(t, err, problem.CodeCooldown)
}

// TestServicePolicyChannels: a service offers the channels its policy
// names; another is refused as a channel the deployment does not offer
// is (invalid_request), before anything is counted; a service that does
// not offer the fallback channel is offered none.
func TestServicePolicyChannels(t *testing.T) {
	otp, st, box := newOverlayOTP(t, func(p *guard.OTPPolicy) {
		p.FallbackChannel = guard.ChannelWhatsApp
		p.PerCountry = map[string]guard.Window{"US": {Limit: 1, Window: time.Hour}}
	}, overlayService(overlaySID, &guard.ServicePolicy{Channels: []string{guard.ChannelSMS}}),
		overlayService(plainSID, &guard.ServicePolicy{Channels: []string{guard.ChannelWhatsApp}}))
	ctx := context.Background()

	const phone = "+14155550200"
	_, err := otp.Send(ctx, guard.SendRequest{Phone: phone, Service: overlaySID, Channel: guard.ChannelWhatsApp})
	wantCode(t, err, problem.CodeInvalidRequest)
	_, err = otp.Send(ctx, guard.SendRequest{Phone: phone, Service: plainSID}) // SMS, which it does not offer
	wantCode(t, err, problem.CodeInvalidRequest)
	_, err = otp.Send(ctx, guard.SendRequest{Phone: phone, Service: overlaySID, Channel: guard.ChannelCall}) // off on the deployment
	wantCode(t, err, problem.CodeInvalidRequest)
	for _, k := range guard.PhoneCounterKeys(phone) {
		if got := st.Count(k); got != 0 {
			t.Errorf("%s = %d after refused channels, want 0", k.Name, got)
		}
	}
	if box.Count() != 0 {
		t.Fatalf("%d sent after refused channels, want none", box.Count())
	}
	if _, err := otp.Send(ctx, guard.SendRequest{Phone: phone, Service: plainSID, Channel: guard.ChannelWhatsApp}); err != nil {
		t.Fatalf("whatsapp for the service that offers it: %v", err)
	}

	// Each service's one send to the country (the fallback channel's was
	// not counted in it; each counts in its own room) is spent: the next
	// SMS is refused by an automatic rule, with the fallback channel for
	// the default service and none for the service without WhatsApp.
	for _, svc := range []string{guard.DefaultService, overlaySID} {
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+14155550202", Service: svc}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		service, fallback string
	}{{guard.DefaultService, guard.ChannelWhatsApp}, {overlaySID, ""}} {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: "+14155550201", Service: tc.service})
		var pe *problem.Error
		if !errors.As(err, &pe) || pe.Code != problem.CodeCountryRateLimited || pe.Fallback != tc.fallback {
			t.Errorf("service %q: %v (fallback %q), want country_rate_limited offering %q", tc.service, err, fallbackOf(pe), tc.fallback)
		}
	}
}

func fallbackOf(pe *problem.Error) string {
	if pe == nil {
		return ""
	}
	return pe.Fallback
}

// TestServicePolicyBudget: a service's own budget is a second ceiling on
// its sends, counted on its own counter at each channel's price; the
// deployment's budget still counts every service's sends, and another
// service does not meet the first's.
func TestServicePolicyBudget(t *testing.T) {
	otp, st, _ := newOverlayOTP(t, func(p *guard.OTPPolicy) { p.Budget = guard.Budget{PerDay: 100} },
		overlayService(overlaySID, &guard.ServicePolicy{Budget: guard.Budget{PerDay: 3}}),
		overlayService(plainSID, nil))
	ctx := context.Background()
	_, day := guard.BudgetKeys()
	own := limit.Key{Space: day.Space, ID: "service:" + overlaySID, Name: day.Name}

	for i, ch := range []string{guard.ChannelSMS, guard.ChannelWhatsApp, guard.ChannelSMS} {
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+1415555021" + string(rune('0'+i)), Service: overlaySID, Channel: ch}); err != nil {
			t.Fatalf("send %d of 3: %v", i+1, err)
		}
	}
	_, err := otp.Send(ctx, guard.SendRequest{Phone: "+14155550219", Service: overlaySID})
	wantCode(t, err, problem.CodeBudgetExhausted)
	if got := st.Count(own); got != 3 {
		t.Errorf("the service's budget = %d, want 3 (a refusal gives its own hit back)", got)
	}
	for _, svc := range []string{plainSID, guard.DefaultService} {
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+14155550220", Service: svc}); err != nil {
			t.Errorf("service %q after the other's budget is spent: %v", svc, err)
		}
	}
	if got := st.Count(day); got != 5 {
		t.Errorf("the deployment's budget = %d, want 5 (every service's sends)", got)
	}
}

// TestValidateServicePolicy: a service's otp: block is held to the
// deployment's rules for what it sets, each mistake named by its place.
func TestValidateServicePolicy(t *testing.T) {
	neg := -time.Second
	for _, tc := range []struct {
		name    string
		policy  guard.ServicePolicy
		dflt    bool
		want    string // "" valid
		deploys guard.Budget
	}{
		{name: "empty: all the deployment's", policy: guard.ServicePolicy{}},
		{name: "every field", policy: guard.ServicePolicy{CodeLength: 10, CodeTTL: time.Minute, MaxVerifyAttempts: 3,
			PerPhone: guard.Window{Limit: 1, Window: time.Hour}, Message: "{code}", Messages: map[string]string{"de": "{code}"},
			Channels: []string{"sms"}, Budget: guard.Budget{PerHour: 1, PerDay: 2}}},
		{name: "code length", policy: guard.ServicePolicy{CodeLength: 12}, want: "services[0].otp.code_length: must be between 6 and 10"},
		{name: "code ttl", policy: guard.ServicePolicy{CodeTTL: time.Hour}, want: "services[0].otp.code_ttl"},
		{name: "guesses", policy: guard.ServicePolicy{MaxVerifyAttempts: 99}, want: "services[0].otp.max_verify_attempts"},
		{name: "cooldown", policy: guard.ServicePolicy{Cooldown: &neg}, want: "services[0].otp.cooldown"},
		{name: "per_phone without a window", policy: guard.ServicePolicy{PerPhone: guard.Window{Limit: 2}}, want: "services[0].otp.per_phone.window"},
		{name: "a message without the code", policy: guard.ServicePolicy{Message: "hello"}, want: "services[0].otp.message: must contain {code}"},
		{name: "a locale spelt otherwise", policy: guard.ServicePolicy{Messages: map[string]string{"pt-br": "{code}"}}, want: "services[0].otp.messages.pt-br"},
		{name: "no channel", policy: guard.ServicePolicy{Channels: []string{}}, want: "services[0].otp.channels: name at least one"},
		{name: "not a channel", policy: guard.ServicePolicy{Channels: []string{"fax"}}, want: "services[0].otp.channels[0]"},
		{name: "a channel twice", policy: guard.ServicePolicy{Channels: []string{"sms", "sms"}}, want: "services[0].otp.channels[1]: sms is named twice"},
		{name: "a budget above the deployment's", policy: guard.ServicePolicy{Budget: guard.Budget{PerDay: 200}},
			deploys: guard.Budget{PerDay: 100}, want: "services[0].otp.budget.per_day: 200 is above the deployment's otp.budget.per_day (100)"},
		{name: "a budget where the deployment has none", policy: guard.ServicePolicy{Budget: guard.Budget{PerDay: 200}}},
		{name: "a negative budget", policy: guard.ServicePolicy{Budget: guard.Budget{PerHour: -1}}, want: "services[0].otp.budget.per_hour"},
		{name: "the default service", policy: guard.ServicePolicy{CodeLength: 8}, dflt: true, want: "services[0].otp: the default service keeps the deployment's otp: policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			p.OTP.Budget = tc.deploys
			svc := overlayService(overlaySID, &tc.policy)
			svc.Default = tc.dflt
			p.Services = []guard.Service{svc}
			err := p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestValidateServiceChannels: a service names only channels the
// deployment's senders offer (SMS always).
func TestValidateServiceChannels(t *testing.T) {
	svcs := []guard.Service{overlayService(overlaySID, &guard.ServicePolicy{Channels: []string{"sms", "whatsapp"}})}
	if err := guard.ValidateServiceChannels(svcs, []string{"whatsapp"}); err != nil {
		t.Errorf("whatsapp offered: %v", err)
	}
	err := guard.ValidateServiceChannels(svcs, []string{"sms", "call"})
	if err == nil || !strings.Contains(err.Error(), "services[0].otp.channels[1]: the whatsapp channel is off on this deployment") {
		t.Errorf("whatsapp not offered: %v, want an error naming services[0].otp.channels[1]", err)
	}
}
