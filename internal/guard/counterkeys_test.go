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
// PhoneCounterKeys, the default service's and a named service's, so that
// an ops unblock cannot miss one added to sendLimits later.
func TestPhoneCounterKeysCoverSendLimits(t *testing.T) {
	const phone, service = "+919800000000", "VA0123456789abcdef0123456789abcdef"
	p := &OTPPolicy{Cooldown: time.Second, Channels: DefaultChannelPolicies()}
	var own []limit.Key
	for _, svc := range []string{DefaultService, service} {
		for _, ch := range Channels() {
			for _, l := range sendLimits(p, Phone{E164: phone}.of(svc), "203.0.113.7", ch, 0) {
				if l.take.Key.Space == "otp" && !slices.Contains(own, l.take.Key) {
					own = append(own, l.take.Key)
				}
			}
		}
	}
	if diff := cmp.Diff(own, PhoneCounterKeys(phone, service)); diff != "" {
		t.Errorf("the number's own send counters (-sendLimits +PhoneCounterKeys):\n%s", diff)
	}
	// The default service's alone, for a deployment without services.
	if diff := cmp.Diff(own[:4], PhoneCounterKeys(phone)); diff != "" {
		t.Errorf("the default service's counters (-sendLimits +PhoneCounterKeys):\n%s", diff)
	}
}
