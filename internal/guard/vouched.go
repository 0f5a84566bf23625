package guard

import "github.com/otpguard/otpguard/internal/limit"

// The vouched tier (docs/abuse.md, "The risk score"): a send the network
// scores low goes out in a tier of its own with its own cap per country
// and hour, since the network vouches for the number, not its history.

// vouched is the rules of a send in the vouched tier: the operator's
// overrides and the spend budget (as a solved send's), and the tier's own
// cap per country and hour (the velocity script on the tier's counters,
// its limit the floor).
func (s *risk) vouched(phone Phone) abuseTakes {
	r, now := region(phone), s.now()
	vol := &VolumeTake{Key: vouchedKey(r), Quarantine: vouchedCutKey(r), Now: now, Hour: hour(now),
		Floor: s.policy.VouchedFloor, QFloor: s.policy.VouchedFloor, Vouched: true}
	return abuseTakes{limits: s.pumping.abuseLimits(phone, false, true), velocity: vol}
}

// vouchedKey is the vouched tier's hourly counters of a country (the
// velocity rule's layout, its own key); vouchedCutKey is never set: the
// tier has no cut, and the script wants a quarantine key of the tag.
func vouchedKey(region string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "vouched"}
}

func vouchedCutKey(region string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "vouchedcut"}
}
