package guard

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/otpguard/otpguard/internal/limit"
)

// TestPhoneCounterKeysCoverSendLimits: every counter of a send that is the
// number's own (space "otp", the ones a block is noted for) is among
// PhoneCounterKeys, so that an ops unblock cannot miss one added to
// sendLimits later.
func TestPhoneCounterKeysCoverSendLimits(t *testing.T) {
	const phone = "+919800000000"
	p := &OTPPolicy{Cooldown: time.Second, Channels: DefaultChannelPolicies()}
	var own []limit.Key
	for _, ch := range Channels() {
		for _, l := range sendLimits(p, phone, "203.0.113.7", ch, 0) {
			if l.take.Key.Space == "otp" && !slices.Contains(own, l.take.Key) {
				own = append(own, l.take.Key)
			}
		}
	}
	if diff := cmp.Diff(own, PhoneCounterKeys(phone)); diff != "" {
		t.Errorf("the number's own send counters (-sendLimits +PhoneCounterKeys):\n%s", diff)
	}
}
