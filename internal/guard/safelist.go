package guard

import "strings"

// safeList is otp.safe_list: numbers and prefixes that skip the velocity
// and conversion rules, never the spend budget.
type safeList []string

// has reports whether the number is on the safe list.
func (l safeList) has(e164 string) bool {
	for _, p := range l {
		if strings.HasPrefix(e164, p) {
			return true
		}
	}
	return false
}

// creditable reports whether a send to phone, or the verify of its code,
// counts in the baselines of the country and prefix rules (the velocity
// credit and normal, the conversion watch's tallies): only untrusted
// traffic does, so a surge of returning users never spends the room new
// numbers get and their conversion never hides an attack. That is every
// number off the safe list whose send is not TierTrusted
// (conversionWatch.send) and whose verify is not a trusted number's
// (VerifyCode, trust.rememberVerified).
func (l safeList) creditable(phone Phone) bool {
	return !l.has(phone.E164)
}
