package guard

import "github.com/otpguard/otpguard/internal/limit"

// The carriers split a country's room (docs/abuse.md, "The carrier"). A
// pumping ring earns only on the ranges of the carriers whose termination
// it shares, while a country's real users spread over its carriers; yet
// the velocity rule, the unverified budget and the solved cap hold a
// country as one, so a ring on one carrier spends the whole country's room
// and every carrier's new users are refused behind it. So each send also
// counts in its carrier's hash within the country (same hash tag: the same
// script and atomic step, one slot on Cluster), and each carrier gets its
// share of the country's room: its credited sends over the lookback / the
// country's, computed once per hour with the baseline, and at least a
// small floor (floor_share of the country's floor, at least 1). The
// country's limits still hold, so the carriers never add to the country's
// room, they split it. While the country's history is too thin to judge
// by (the normal conversion's history_min_sends) the share is 1: no split.
// A country whose numbers have no carrier data is one carrier, "unknown",
// whose share is 1. The solved tier's conversion watch judges each
// carrier of a country apart, and a low solved conversion cuts that
// carrier's solved cap (conversion.go): a bot on one carrier spends that
// carrier's room and cut, and the other carriers' new users keep theirs.

// DefaultCarrierFloorShare is otp.country_velocity.carrier_floor_share:
// a carrier's floors are this share of its country's, at least 1.
const DefaultCarrierFloorShare = 0.1

// carrierSplit reports whether the policy splits each country's room
// among its carriers.
func (v CountryVelocity) carrierSplit() bool { return v.CarrierSplit && v.CarrierFloorShare > 0 }

// withCarrier completes vol, the count of an untrusted or a solved send,
// with its carrier's share (nil, known trusted, or the velocity rule off: as it is).
func (s *velocity) withCarrier(phone Phone, vol *VolumeTake) *VolumeTake {
	if vol == nil || vol.Trusted || vol.NewOff || !s.policy.carrierSplit() {
		return vol
	}
	vol.Carrier = carrierTakeOf(phone, s.policy.CarrierFloorShare, vol.Solved != nil)
	return vol
}

// carrierTake is the velocity rule's carrier part of a send to phone
// (zero: no split), for a verify's credit and the watch's subjects.
func (s *velocity) carrierTake(phone Phone, solved bool) CarrierTake {
	if !s.policy.carrierSplit() {
		return CarrierTake{}
	}
	return carrierTakeOf(phone, s.policy.CarrierFloorShare, solved)
}

// carrierTakeOf is the carrier part of a send to phone: the velocity
// rule's, or the solved tier's (solved), each carrier's floors floorShare
// of the country's.
func carrierTakeOf(phone Phone, floorShare float64, solved bool) CarrierTake {
	return carrierTakeFor(phone.in(region(phone)), CarrierOf(phone), floorShare, solved)
}

// carrierTakeFor is carrierTakeOf for carrier c of the country's room
// (its ID, room.go).
func carrierTakeFor(room string, c Carrier, floorShare float64, solved bool) CarrierTake {
	counts, solvedCounts, cut := carrierKeys(room, c.Key)
	since := limit.Key{Space: "otp:vel", ID: room, Name: "carriers"}
	if solved {
		return CarrierTake{Name: c.Name, Key: solvedCounts, Cut: cut, Share: counts, Since: since, FloorShare: floorShare}
	}
	return CarrierTake{Name: c.Name, Key: counts, Since: since, FloorShare: floorShare}
}

// carrierKeys are a carrier's keys within its country's velocity rule:
// its counts ("s:<hour>" sends, "v:<hour>" verifies, "p:<hour>" its
// share), its solved counts, and the cut of its solved cap.
func carrierKeys(room, carrier string) (counts, solved, cut limit.Key) {
	name := "c:" + carrier
	return limit.Key{Space: "otp:vel", ID: room, Name: name},
		limit.Key{Space: "otp:vel", ID: room, Name: name + ":solved"},
		limit.Key{Space: "otp:vel", ID: room, Name: name + ":solvedcut"}
}
