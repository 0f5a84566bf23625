package guard

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/problem"
)

// High-risk destinations (docs/abuse.md, "High-risk destinations"). The
// non-geographic numbering of the ITU, libphonenumber's region "001" (+800
// toll free, +808 shared cost, +870 Inmarsat, +878 personal, +881 GMSS
// satellite, +882 and +883 international networks, +888 UAN, +979
// premium rate), is where pumping pays best and where legitimate sign-ins
// essentially never are. Several of them are typed mobile (+870, +881,
// +882 ...), so the number type rule lets them through: they are refused
// by default, before the type rule, unless otp.allow_high_risk names a
// prefix of them. The other classes legitimate OTP never uses (premium
// rate, shared cost, UAN, pager, voicemail, ...) are number types, left
// out of otp.allowed_number_types by default.

// nonGeoCodes are the calling codes of region "001", as "+870", "+881" ...
var nonGeoCodes = func() []string {
	var out []string
	for cc := range phonenumbers.GetSupportedGlobalNetworkCallingCodes() {
		out = append(out, fmt.Sprintf("+%d", cc))
	}
	return out
}()

// sortedCodes are nonGeoCodes in order, for messages.
func sortedCodes() []string {
	out := slices.Clone(nonGeoCodes)
	slices.Sort(out)
	return out
}

// highRiskPrefix reports whether p ("+" and digits) lies within the
// non-geographic numbering: what otp.allow_high_risk may name.
func highRiskPrefix(p string) bool {
	for _, cc := range nonGeoCodes {
		if strings.HasPrefix(p, cc) {
			return true
		}
	}
	return false
}

// checkHighRisk refuses a non-geographic number (no region) that
// otp.allow_high_risk (allow) does not name: 403 country_not_allowed, as
// a number outside the allowed countries, since it has no country. It reports
// whether the number is high-risk and allowed (then the country list,
// which it cannot be on, does not apply to it).
func checkHighRisk(allow []string, phone Phone) (allowed bool, err error) {
	if phone.Region != "" {
		return false, nil
	}
	for _, p := range allow {
		if strings.HasPrefix(phone.E164, p) {
			return true, nil
		}
	}
	cc := phone.E164[:min(4, len(phone.E164))]
	if phone.num != nil {
		cc = fmt.Sprintf("+%d", phone.num.GetCountryCode())
	}
	return false, problem.Errorf(problem.CodeCountryNotAllowed,
		"codes are not sent to international network numbers (%s) unless the policy allows them (otp.allow_high_risk)", cc)
}
