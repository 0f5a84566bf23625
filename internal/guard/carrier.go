package guard

import (
	"strings"
	"unicode"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/limit"
)

// The carrier of a number (docs/abuse.md, "The carrier"). A pumping ring
// earns only on numbers whose termination it shares: ranges leased from,
// or colluding with, one carrier, while a country's real users spread over
// its carriers. libphonenumber ships each range's original carrier offline
// (its carrier data, pinned with the module's version in go.mod), so a
// send's carrier costs a map look-up, no call. Ported numbers keep their
// range's carrier, and the names can be stale or change between
// libphonenumber's versions: the rules key a carrier by a normalised name
// within its country (CarrierKey), so "MTN" and "Mtn " are one carrier and
// an upgrade that only respells a name does not split its history.

// UnknownCarrier is the carrier of a number whose range libphonenumber
// names none (fixed lines, non-geographic numbers, new ranges).
const UnknownCarrier = "unknown"

// Carrier is a number's carrier: Name as libphonenumber spells it in
// English (for people), Key normalised (for keys, metrics and overrides).
type Carrier struct {
	Name string // "MTN", "Airtel"; "unknown"
	Key  string // "mtn", "airtel"; "unknown"
}

// CarrierOf is the original carrier of phone's range.
func CarrierOf(p Phone) Carrier {
	if p.num == nil {
		return Carrier{Name: UnknownCarrier, Key: UnknownCarrier}
	}
	name, err := phonenumbers.GetCarrierForNumber(p.num, "en")
	if err != nil || strings.TrimSpace(name) == "" {
		return Carrier{Name: UnknownCarrier, Key: UnknownCarrier}
	}
	name = strings.TrimSpace(name)
	return Carrier{Name: name, Key: CarrierKey(name)}
}

// CarrierKey normalises a carrier's name: lower case, letters and digits
// only, runs of anything else one "-" ("Vodafone Idea" "vodafone-idea",
// "9mobile" "9mobile", "T-Mobile" "t-mobile"); "unknown" for a name with
// neither. At most 32 letters and digits, so a key stays short.
func CarrierKey(name string) string {
	var b strings.Builder
	n, dash := 0, false
	for _, r := range strings.ToLower(name) {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			dash = true
			continue
		}
		if n == 32 {
			break
		}
		if dash && n > 0 {
			b.WriteByte('-')
		}
		dash = false
		b.WriteRune(r)
		n++
	}
	if n == 0 {
		return UnknownCarrier
	}
	return b.String()
}

// warmCarriers makes libphonenumber load its carrier data now (about
// 16 ms), at start-up, not on the first send.
func warmCarriers() {
	if p, err := ParsePhone("+2348031234567", ""); err == nil {
		_ = CarrierOf(p)
	}
}

// CarrierTake is the carrier's part of a VolumeTake (carriershare.go):
// FloorShare 0 is off (no split, the keys empty). The keys share the
// country's hash tag.
type CarrierTake struct {
	Name string    // for people: "MTN", "unknown"
	Key  limit.Key // the carrier's counts: the velocity rule's, or the solved tier's
	// The solved tier: Cut holds while the carrier's solved cap is cut,
	// and Share is the carrier's velocity counts, whose share it reads.
	Cut   limit.Key
	Share limit.Key
	// Since holds the hour the country's carriers were first counted:
	// the country's history before it is no carrier's.
	Since      limit.Key
	FloorShare float64
}
