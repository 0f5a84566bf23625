package guard_test

import (
	"testing"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestParsePhoneAsLibphonenumber: ParsePhone finds a number's validity and
// type in one pass; for libphonenumber's example numbers of every region
// and type, each also cut short by a digit and lengthened by one, it
// answers as phonenumbers.IsValidNumber and GetNumberType do.
func TestParsePhoneAsLibphonenumber(t *testing.T) {
	types := []phonenumbers.PhoneNumberType{phonenumbers.FIXED_LINE, phonenumbers.MOBILE, phonenumbers.TOLL_FREE,
		phonenumbers.PREMIUM_RATE, phonenumbers.SHARED_COST, phonenumbers.VOIP, phonenumbers.PERSONAL_NUMBER,
		phonenumbers.PAGER, phonenumbers.UAN, phonenumbers.VOICEMAIL}
	var raws []string
	add := func(n *phonenumbers.PhoneNumber) {
		if n == nil {
			return
		}
		e := phonenumbers.Format(n, phonenumbers.E164)
		raws = append(raws, e, e[:len(e)-1], e+"7")
	}
	for region := range phonenumbers.GetSupportedRegions() {
		for _, ty := range types {
			add(phonenumbers.GetExampleNumberForType(region, ty))
		}
	}
	for cc := range phonenumbers.GetSupportedGlobalNetworkCallingCodes() {
		add(phonenumbers.GetExampleNumberForNonGeoEntity(cc))
	}
	if len(raws) < 1000 {
		t.Fatalf("only %d numbers to try", len(raws))
	}
	for _, raw := range raws {
		num, err := phonenumbers.Parse(raw, "ZZ")
		if err != nil {
			continue
		}
		wantValid := phonenumbers.IsValidNumber(num)
		p, err := guard.ParsePhone(raw, "")
		if got := err == nil; got != wantValid {
			t.Errorf("%s: valid %v, want %v", raw, got, wantValid)
			continue
		}
		if err == nil {
			if got, want := p.Type(), typeNames[phonenumbers.GetNumberType(num)]; got != want || want == "" {
				t.Errorf("%s: type %q, want %q (not unknown)", raw, got, want)
			}
		}
	}
}

// typeNames are otp.allowed_number_types' names of libphonenumber's types.
var typeNames = map[phonenumbers.PhoneNumberType]string{
	phonenumbers.FIXED_LINE: "fixed_line", phonenumbers.MOBILE: "mobile", phonenumbers.FIXED_LINE_OR_MOBILE: "fixed_line_or_mobile",
	phonenumbers.TOLL_FREE: "toll_free", phonenumbers.PREMIUM_RATE: "premium_rate", phonenumbers.SHARED_COST: "shared_cost",
	phonenumbers.VOIP: "voip", phonenumbers.PERSONAL_NUMBER: "personal_number", phonenumbers.PAGER: "pager",
	phonenumbers.UAN: "uan", phonenumbers.VOICEMAIL: "voicemail",
}

// TestParsePhoneRefusesJunkBeforeTheLibrary: input with fewer than two
// decimal digits, which libphonenumber refuses too (checked here), is
// refused before it reaches the library: two allocations (the error, and
// ErrorCode's errors.As), not the library's dozens. A
// number in other scripts' digits still reaches it and parses.
func TestParsePhoneRefusesJunkBeforeTheLibrary(t *testing.T) {
	for _, raw := range []string{"hello", "+", "+9", "++++----", "tel:+x;phone-context=+a", "FLOWERS", "٩", "x1y", "(+)"} {
		if _, err := phonenumbers.Parse(raw, "IN"); err == nil {
			t.Errorf("libphonenumber parses %q: the pre-check must not refuse it", raw)
		}
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := guard.ParsePhone(raw, "IN"); problem.CodeOf(err) != problem.CodeInvalidPhone {
				t.Fatalf("ParsePhone(%q): %v, want %s", raw, err, problem.CodeInvalidPhone)
			}
		})
		if allocs > 2 {
			t.Errorf("ParsePhone(%q): %.0f allocations, want at most 2 (refused before libphonenumber)", raw, allocs)
		}
	}
	for raw, want := range map[string]string{"+٩١٩٨٠٠٠٠٠٠٠٠": "+919800000000", "+１ ４１５ ５５５ ０１００": "+14155550100"} {
		got, err := guard.ParsePhone(raw, "")
		if err != nil || got.E164 != want {
			t.Errorf("ParsePhone(%q) = %q, %v; want %s", raw, got.E164, err, want)
		}
	}
}
