package guard

import (
	"fmt"
	"strings"

	"github.com/otpguard/otpguard/internal/limit"
)

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

// CarrierTake is the carrier's part of a VolumeTake: FloorShare 0 is
// off (no split). The keys share the country's hash tag.
type CarrierTake struct {
	Name string    // for people: "MTN", "unknown"
	Key  limit.Key // the carrier's counts: the velocity rule's, or the solved tier's
	// The solved tier: Cut holds while the carrier's solved cap is cut,
	// and Share is the carrier's velocity counts, whose share it reads.
	Cut        limit.Key
	Share      limit.Key
	FloorShare float64
}

// On reports whether the carrier splits the country's room.
func (c CarrierTake) On() bool { return c.FloorShare > 0 && c.Key.Name != "" }

// carrierKey is a carrier's counts within its country's velocity rule:
// "s:<hour>" sends, "v:<hour>" verifies and "p:<hour>" its share.
func carrierKey(region, carrier string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "c:" + carrier}
}

// carrierSolvedKey is a carrier's solved counts within its country's.
func carrierSolvedKey(region, carrier string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "c:" + carrier + ":solved"}
}

// carrierSolvedCutKey holds while a carrier's solved cap is cut.
func carrierSolvedCutKey(region, carrier string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "c:" + carrier + ":solvedcut"}
}

// carrierSplit reports whether the policy splits each country's room
// among its carriers.
func (v CountryVelocity) carrierSplit() bool { return v.CarrierSplit && v.CarrierFloorShare > 0 }

// carrierTake is the carrier's part of the velocity rule's take of a send
// to phone (zero: no split).
func (s *velocity) carrierTake(phone Phone) CarrierTake {
	if !s.policy.carrierSplit() {
		return CarrierTake{}
	}
	c := CarrierOf(phone)
	return CarrierTake{Name: c.Name, Key: carrierKey(region(phone), c.Key), FloorShare: s.policy.CarrierFloorShare}
}

// carrierSolved turns a velocity take's carrier part into the solved
// tier's: the carrier's solved counts and cut, its velocity share.
func carrierSolved(c CarrierTake) CarrierTake {
	if !c.On() {
		return c
	}
	r, k := c.Key.ID, strings.TrimPrefix(c.Key.Name, "c:")
	c.Share, c.Key, c.Cut = c.Key, carrierSolvedKey(r, k), carrierSolvedCutKey(r, k)
	return c
}

// carrierDetail is the carrier's part of a refusal's audit detail and log:
// " carrier=MTN" when the carrier's share refused, "" otherwise.
func carrierDetail(t VolumeTake, res VolumeResult) string {
	if !res.Carrier {
		return ""
	}
	return fmt.Sprintf(" carrier=%s", t.Carrier.Name)
}
