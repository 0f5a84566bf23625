package guard

import (
	"errors"

	"github.com/otpguard/otpguard/internal/limit"
)

// The vouched tier (docs/abuse.md, "The risk score"): a send the network
// scores low goes out in a tier of its own with its own cap per country
// and hour, since the network vouches for the number, not its history.

// vouched is the rules of a send in the vouched tier: the operator's
// overrides and the spend budget (as a solved send's), and the tier's own
// cap per country and hour, max(vouched_floor, factor x baseline), where
// baseline is the country's busiest verified hour of the lookback as the
// refused count read it: a country whose real users the network vouches
// for is not held to the floor while a bot spends its new numbers' room,
// and the cap stays what the country's verified history earned, which a
// ring's low-scored numbers (verifying nothing) do not raise.
func (s *risk) vouched(phone Phone, baseline int64) abuseTakes {
	r, now := phone.in(region(phone)), s.now()
	floor := max(s.policy.VouchedFloor, int64(s.pumping.velocity.policy.Factor*float64(baseline)))
	vol := &VolumeTake{Key: vouchedKey(r), Quarantine: vouchedCutKey(r), Now: now, Hour: hour(now),
		Floor: floor, QFloor: floor, Vouched: true}
	return abuseTakes{limits: s.pumping.abuseLimits(phone, false, true), velocity: vol}
}

// vouchedKey is the vouched tier's hourly counters of a country (the
// velocity rule's layout, its own key); vouchedCutKey is never set: the
// tier has no cut, and the script wants a quarantine key of the tag.
func vouchedKey(room string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: room, Name: "vouched"}
}

func vouchedCutKey(room string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: room, Name: "vouchedcut"}
}

// errVouchedCap marks a refusal by the vouched tier's cap.
var errVouchedCap = errors.New("the vouched tier's cap")
