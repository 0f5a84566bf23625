package guard

import (
	"errors"
	"fmt"

	"github.com/otpguard/otpguard/internal/problem"
)

// Refusals by the automatic rules: the prefix and country limits, the
// country velocity rule and the conversion watch's prefix blocks. A
// challenge (challenge.go) or trust (trust.go) may lift them; an
// operator's limit or entry, and every other refusal, it may not.

// automaticRefusal reports whether err is a refusal by an automatic rule,
// which a challenge may lift: not per number, per address, cooldown,
// budget or an operator's action.
func automaticRefusal(err error) bool {
	switch problem.CodeOf(err) {
	case problem.CodePrefixRateLimited, problem.CodeCountryRateLimited, problem.CodeUnusualVolume:
		return !errors.Is(err, errOperatorLimit)
	case problem.CodeDenied:
		return errors.Is(err, errAutomaticBlock)
	}
	return false
}

// errOperatorLimit marks a refusal by a limit the ops desk's override set.
var errOperatorLimit = errors.New("a limit an operator's override set")

// errAutomaticBlock marks a deny-list entry the conversion watch made.
var errAutomaticBlock = fmt.Errorf("an automatic block (%s)", ConversionActor)
