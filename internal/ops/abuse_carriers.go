package ops

import (
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The attack view's carriers (GET /ops/abuse, the rows "NG / MTN" under
// their country): a pumping ring earns on the ranges of the carriers whose
// termination it shares, so its traffic piles on one carrier of a country
// while real users spread over all of them. The recorder counts each send,
// refusal, challenge and verification under the number's original carrier
// too (guard.CarrierOf: an offline look-up, made off the request's path,
// as the recorder's other counts are).

// OtherCarrier is the key a country's carriers past the caps count under
// (the store's hash, the rows shown), and OtherCarrierName its name.
const (
	OtherCarrier     = OtherField
	OtherCarrierName = "other"
)

// maxCarrierName bounds the name kept with a carrier's counts.
const maxCarrierName = 40

func newAbuseCounts(hour int64) *AbuseCounts {
	return &AbuseCounts{Hour: hour, Countries: map[string]int64{}, Prefixes: map[string]int64{}, Carriers: map[string]int64{},
		Services: map[string]int64{}}
}

// carrierKind reports whether the carriers count kind: sends, refusals,
// verifications, the challenges among the refusals and the solved tier's
// sends and cap refusals (the cap has a carrier's share); not the trusted
// sends or the refusals' other codes, which the country rows show.
func carrierKind(kind string) bool {
	switch kind {
	case "s", "v", "r", "r:" + CodeChallengeRequired, kindSolved, kindSolvedCap:
		return true
	}
	return false
}

// carrierField is the head of phone's carrier fields,
// "<REGION>|<key>|<name>|": phone's original carrier, "unknown" when
// libphonenumber names none or phone does not parse (then it counts in its
// country only under that name).
func carrierField(phone, region string) string {
	c := guard.Carrier{Name: guard.UnknownCarrier, Key: guard.UnknownCarrier}
	if p, err := guard.ParsePhone(phone, ""); err == nil {
		c = guard.CarrierOf(p)
	}
	name := []rune(strings.ReplaceAll(c.Name, "|", "/"))
	name = name[:min(len(name), maxCarrierName)]
	return region + "|" + c.Key + "|" + string(name) + "|"
}

// MaxCarrierRows bounds the carrier rows under one country: the busiest,
// and every carrier an override holds; the rest are one "other" row.
const MaxCarrierRows = 5

// CarrierRow is one carrier of a country in a window.
type CarrierRow struct {
	Key  string // guard.CarrierKey; OtherCarrier for the rest
	Name string // libphonenumber's name, "MTN"; OtherCarrierName for the rest
	AbuseTally
	// Limits is the ops desk's carrier_limit in force, if any;
	// PausedUntil when its carrier_pause ends (zero: not paused).
	Limits      []AbuseLimit
	PausedUntil time.Time
	// SolvedCapSpent: the solved cap (or the carrier's share of it)
	// refused a send to the carrier in the clock hour under way.
	SolvedCapSpent bool
	// SolvedCap is the carrier's share of the solved cap in force this
	// clock hour; nil when the carriers do not split the country's room,
	// for the "other" row, or when it was not read.
	SolvedCap *SolvedCap
}

// SubjectName is the row as the desk names it, "NG / MTN".
func (r CarrierRow) SubjectName(country string) string { return guard.SubjectName(country, r.Name) }

// addCarriers adds one hour's carrier fields ("<region>|<key>|<name>|
// <kind>") to their rows, by country and key; a key met under two names
// (libphonenumber respelled it) keeps the first name read.
func addCarriers(rows map[string]map[string]*CarrierRow, fields map[string]int64) {
	for f, n := range fields {
		parts := strings.Split(f, "|")
		if len(parts) != 4 {
			continue
		}
		region, key, name, kind := parts[0], parts[1], parts[2], parts[3]
		if rows[region] == nil {
			rows[region] = map[string]*CarrierRow{}
		}
		r := rows[region][key]
		if r == nil {
			r = &CarrierRow{Key: key, Name: name}
			rows[region][key] = r
		}
		r.add(kind, n)
	}
}

// attachCarriers gives each country row its carriers' rows, busiest first,
// each with the overrides in force (e) on it; at most MaxCarrierRows and
// the carriers an override holds, the rest summed into one "other" row.
func attachCarriers(countries []CountryRow, rows map[string]map[string]*CarrierRow, e guard.Enforced) {
	busy := func(t AbuseTally) int64 { return t.Sends + t.Refusals }
	for i := range countries {
		country := countries[i].Country
		var list []CarrierRow
		var other *CarrierRow
		for _, r := range rows[country] {
			subject := guard.CarrierSubject{Region: country, Key: r.Key}.String()
			if l := e.Carrier(subject); l.Limit > 0 {
				r.Limits = append(r.Limits, AbuseLimit{Rule: "carrier_limit", Limit: l.Limit, Window: l.Window, Override: true})
			}
			if until, ok := e.CarrierPause(subject); ok {
				r.PausedUntil = until
			}
			list = append(list, *r)
		}
		slices.SortFunc(list, func(a, b CarrierRow) int {
			if a.Key == OtherCarrier || b.Key == OtherCarrier { // the store's "other" last
				return boolOrder(a.Key == OtherCarrier, b.Key == OtherCarrier)
			}
			if c := busy(b.AbuseTally) - busy(a.AbuseTally); c != 0 {
				return sign(c)
			}
			return strings.Compare(a.Key, b.Key)
		})
		kept := list[:0:0]
		for n, r := range list {
			held := len(r.Limits) > 0 || !r.PausedUntil.IsZero()
			if r.Key != OtherCarrier && (n < MaxCarrierRows || held) {
				kept = append(kept, r)
				continue
			}
			if other == nil {
				other = &CarrierRow{Key: OtherCarrier, Name: OtherCarrierName}
			}
			other.addTally(r.AbuseTally)
			other.SolvedCapSpent = other.SolvedCapSpent || r.SolvedCapSpent
		}
		if other != nil {
			kept = append(kept, *other)
		}
		countries[i].Carriers = kept
	}
}

// boolOrder orders false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// addTally adds t's counts to r's.
func (r *CarrierRow) addTally(t AbuseTally) {
	r.Sends += t.Sends
	r.Refusals += t.Refusals
	r.Verifications += t.Verifications
	r.Trusted += t.Trusted
	r.Solved += t.Solved
	r.SolvedCapped += t.SolvedCapped
	for code, n := range t.ByCode {
		if r.ByCode == nil {
			r.ByCode = map[string]int64{}
		}
		r.ByCode[code] += n
	}
}
