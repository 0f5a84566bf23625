package guard_test

import (
	"testing"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/guard"
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
