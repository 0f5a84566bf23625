package guard

import (
	"testing"

	"github.com/otpguard/otpguard/internal/problem"
)

// TestRiskLimitAutomatic: a limit's refusal starts its lookup beside the
// refusal's give-backs exactly when the error refused makes of it is one
// automaticRefusal hands to the risk score.
func TestRiskLimitAutomatic(t *testing.T) {
	codes := []problem.Code{problem.CodeCooldown, problem.CodePhoneRateLimited, problem.CodeIPRateLimited,
		problem.CodePrefixRateLimited, problem.CodeCountryRateLimited, problem.CodeCarrierRateLimited,
		problem.CodeUnusualVolume, problem.CodeBudgetExhausted}
	for _, c := range codes {
		for _, operator := range []bool{false, true} {
			l := limitedTake{denial: c, operator: operator}
			e := &problem.Error{Code: c}
			if operator {
				e.Err = errOperatorLimit
			}
			if got, want := l.automatic(), automaticRefusal(e); got != want {
				t.Errorf("%s, operator %t: automatic %t, automaticRefusal %t", c, operator, got, want)
			}
		}
	}
}
