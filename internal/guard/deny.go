package guard

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// maxDenyDigits is the longest E.164 number; a longer pattern can match nothing.
const maxDenyDigits = 15

// DenyEntry is a deny-listed number or number prefix. Pattern is "+" and
// digits: a whole E.164 number ("+919800000000") blocks that number, a
// shorter one ("+88213") blocks every number it begins.
type DenyEntry struct {
	ID        int64
	Pattern   string
	Reason    string
	Author    string
	CreatedAt time.Time
	// ExpiresAt is nil for an entry that stays until removed. Temporary
	// entries exist so that an emergency block cannot be forgotten forever.
	ExpiresAt *time.Time
}

// Expired reports whether the entry has stopped applying at now. An entry
// is already expired at the instant ExpiresAt, so that "expires at 12:00"
// never blocks a send at 12:00.
func (d DenyEntry) Expired(now time.Time) bool {
	return d.ExpiresAt != nil && !now.Before(*d.ExpiresAt)
}

// Matches reports whether the entry blocks the E.164 number e164 at now.
// The time is passed in, not read, so that one decision uses one clock.
// An entry with a malformed pattern matches nothing: an empty or "+"
// pattern would otherwise block every number.
func (d DenyEntry) Matches(e164 string, now time.Time) bool {
	if !validDenyPattern(d.Pattern) || d.Expired(now) {
		return false
	}
	return strings.HasPrefix(e164, d.Pattern)
}

// ValidateDenyPattern returns an *Error with CodeInvalidRequest unless p is
// "+" followed by 1 to 15 ASCII digits.
func ValidateDenyPattern(p string) error {
	if !validDenyPattern(p) {
		return problem.Errorf(problem.CodeInvalidRequest,
			"pattern must be '+' followed by 1 to %d digits, like +919800000000 or +88213", maxDenyDigits)
	}
	return nil
}

func validDenyPattern(p string) bool {
	if len(p) < 2 || len(p) > 1+maxDenyDigits || p[0] != '+' {
		return false
	}
	for i := 1; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// denyCheck is a send's deny-list step.
type denyCheck struct {
	deny  DenyChecker
	trust *trust // an automatic block spares a trusted number
	now   func() time.Time
}

// checkDenied refuses a deny-listed number, before any counter is spent.
func (s *denyCheck) checkDenied(phone Phone) error {
	if e, ok := s.deny.Denied(phone.E164, s.now()); ok {
		err := fmt.Errorf("deny-list entry %d (%s)", e.ID, MaskPhone(e.Pattern))
		if e.Author == ConversionActor { // a challenge or trust may lift it
			err = fmt.Errorf("%w: %w", err, errAutomaticBlock)
		}
		return &problem.Error{Code: problem.CodeDenied, Message: "this number may not receive codes", Err: err}
	}
	return nil
}

// checkDeniedTier is checkDenied for a send of tier. An entry the
// conversion watch made (an automatic prefix block) refuses neither a
// solved send (challenge.go) nor a trusted number (trust.go: the app's
// word, or its mark read at once), which it then answers TierTrusted; an
// operator's entry refuses every number.
func (s *denyCheck) checkDeniedTier(ctx context.Context, phone Phone, tier Tier, account bool) (Tier, error) {
	err := s.checkDenied(phone)
	switch {
	case err == nil || !automaticRefusal(err):
		return tier, err
	case tier != TierNew:
		return tier, nil
	case s.trust.trustedNow(ctx, phone, account):
		return TierTrusted, nil
	}
	return tier, err
}
