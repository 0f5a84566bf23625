package guard

import (
	"slices"

	"github.com/otpguard/otpguard/internal/problem"
)

// Destinations a send may go to: the countries and carriers paused by the
// ops desk (override.go, carrier_override.go), the high-risk numbering
// (highrisk.go), the allowed countries and the allowed number types
// (numbertype.go).

// checkDestination refuses high-risk destinations the policy does not
// allow (highrisk.go), and numbers outside the allowed countries and
// number types.
func (s *pumping) checkDestination(phone Phone) error {
	if now := s.now(); s.overrides != nil {
		if err := checkPaused(s.overrides, phone, now); err != nil {
			return err
		}
	}
	highRisk, err := checkHighRisk(s.policy.AllowHighRisk, phone)
	if err != nil {
		return err
	}
	if c := s.policy.AllowedCountries; len(c) > 0 && !highRisk && !slices.Contains(c, phone.Region) {
		return problem.Errorf(problem.CodeCountryNotAllowed, "codes are not sent to numbers of this country")
	}
	if allowed := s.policy.AllowedNumberTypes; len(allowed) > 0 {
		if t := phone.Type(); !slices.Contains(allowed, t) {
			return problem.Errorf(problem.CodeNumberTypeNotAllowed, "codes are not sent to this type of number (%s)", t)
		}
	}
	return nil
}
