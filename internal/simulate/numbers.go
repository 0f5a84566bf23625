package simulate

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/nyaruka/phonenumbers"
)

// DayCurve is the share of a population's peak_per_hour tried in each
// hour of the day (UTC on the virtual clock): quiet at night, busiest in
// the evening.
var DayCurve = [24]float64{0.25, 0.2, 0.15, 0.15, 0.15, 0.2, 0.3, 0.45, 0.6, 0.7, 0.75, 0.8,
	0.8, 0.75, 0.75, 0.75, 0.8, 0.85, 0.9, 0.95, 1, 0.9, 0.6, 0.4}

// numberSource draws new numbers for one population: uniformly random
// valid mobile numbers of a country, or valid numbers of given ranges.
type numberSource struct {
	ranges []numberRange
	// country, when set, is the region every number drawn must belong to.
	country string
	// carriers, when set, are the keys (guard.CarrierKey) of the only
	// carriers numbers are drawn from, and weights the ranges' shares of
	// the draws (restrictToCarriers); unset, every range weighs the same.
	carriers map[string]bool
	weights  []float64
}

// numberRange is a leading part of E.164 numbers ("+234803") and the
// total digit counts at which it makes valid numbers.
type numberRange struct {
	lead    string // digits after the +
	lengths []int  // total digits, country code included
	mobile  bool   // only mobile (or fixed-line-or-mobile) numbers count
}

// probes is how many random completions tell a range that makes valid
// numbers from one that does not.
const probes = 24

// newNumberSource builds the ranges of a population. Without prefixes it
// finds the country's leading three national digits that make mobile
// numbers (by the country's mobile pattern in libphonenumber's metadata,
// which is quick to match), so that a draw is close to uniform over its
// mobiles.
func newNumberSource(country string, prefixes []string) (*numberSource, error) {
	r := rand.New(rand.NewPCG(1, 2)) // the table is the same in every run
	s := &numberSource{}
	if len(prefixes) > 0 {
		for _, p := range prefixes {
			nr, ok := probeRange(r, strings.TrimPrefix(p, "+"))
			if !ok {
				return nil, fmt.Errorf("%s makes no valid number", p)
			}
			s.ranges = append(s.ranges, nr)
		}
		return s, nil
	}
	s.country = country
	md := regionMetadata(country)
	if md == nil || md.GetMobile() == nil {
		return nil, fmt.Errorf("no mobile numbers known for %s", country)
	}
	pattern, err := regexp.Compile("^(?:" + md.GetMobile().GetNationalNumberPattern() + ")$")
	if err != nil {
		return nil, fmt.Errorf("the mobile pattern of %s: %w", country, err)
	}
	lengths := md.GetMobile().GetPossibleLength()
	if len(lengths) == 0 {
		lengths = md.GetGeneralDesc().GetPossibleLength()
	}
	cc := strconv.Itoa(phonenumbers.GetCountryCodeForRegion(country))
	for lead := range 1000 {
		nr := numberRange{lead: fmt.Sprintf("%s%03d", cc, lead), mobile: true}
		for _, n := range lengths {
			for range probes {
				if national := randomDigits(r, fmt.Sprintf("%03d", lead), int(n)); pattern.MatchString(national) {
					nr.lengths = append(nr.lengths, len(cc)+int(n))
					break
				}
			}
		}
		if len(nr.lengths) > 0 {
			s.ranges = append(s.ranges, nr)
		}
	}
	if len(s.ranges) == 0 {
		return nil, fmt.Errorf("no mobile numbers found for %s", country)
	}
	return s, nil
}

// regionMetadata is libphonenumber's metadata of region; nil if unknown.
func regionMetadata(region string) *phonenumbers.PhoneMetadata {
	all, err := phonenumbers.MetadataCollection()
	if err != nil {
		return nil
	}
	for _, md := range all.GetMetadata() {
		if md.GetId() == region {
			return md
		}
	}
	return nil
}

// randomDigits fills lead with random digits to n digits.
func randomDigits(r *rand.Rand, lead string, n int) string {
	b := []byte(lead)
	for len(b) < n {
		b = append(b, byte('0'+r.IntN(10)))
	}
	return string(b[:n])
}

// probeRange finds the lengths at which lead makes valid numbers.
func probeRange(r *rand.Rand, lead string) (numberRange, bool) {
	nr := numberRange{lead: lead}
	for n := max(len(lead)+1, 8); n <= 15; n++ {
		for range probes {
			if _, ok := nr.complete(r, n, ""); ok {
				nr.lengths = append(nr.lengths, n)
				break
			}
		}
	}
	return nr, len(nr.lengths) > 0
}

// complete fills lead with random digits to n digits; ok when the result
// is a valid number of the kind wanted (of region, when not ""). The
// number is returned in E.164, as the service writes it.
func (nr numberRange) complete(r *rand.Rand, n int, region string) (string, bool) {
	num, err := phonenumbers.Parse("+"+randomDigits(r, nr.lead, n), "ZZ")
	if err != nil || !phonenumbers.IsValidNumber(num) {
		return "", false
	}
	if nr.mobile {
		if t := phonenumbers.GetNumberType(num); t != phonenumbers.MOBILE && t != phonenumbers.FIXED_LINE_OR_MOBILE {
			return "", false
		}
	}
	if region != "" && phonenumbers.GetRegionCodeForNumber(num) != region {
		return "", false
	}
	return phonenumbers.Format(num, phonenumbers.E164), true
}

// populationSource is the number source of p: its prefixes, or its
// country's mobiles, of its carriers when it names some.
func populationSource(p *Population) (*numberSource, error) {
	s, err := newNumberSource(p.Country, p.Prefixes)
	if err != nil || len(p.Carriers) == 0 {
		return s, err
	}
	if err := s.restrictToCarriers(p.Country, p.Carriers); err != nil {
		return nil, err
	}
	return s, nil
}

// draw returns a new valid number. Without carriers it makes exactly the
// draws it made before carriers existed, so that a seeded report of a
// scenario that names none stays what it was (TestDefaultDrawsUnchanged).
func (s *numberSource) draw(r *rand.Rand) string {
	if s.carriers != nil {
		return s.drawOfCarriers(r)
	}
	for {
		nr := s.ranges[r.IntN(len(s.ranges))]
		for range 100 {
			if e, ok := nr.complete(r, nr.lengths[r.IntN(len(nr.lengths))], s.country); ok {
				return e
			}
		}
	}
}

var prefixRE = regexp.MustCompile(`^\+[1-9][0-9]{0,11}$`)

// checkPrefix refuses a range that is not written as E.164 digits or
// makes no valid number.
func checkPrefix(p string) error {
	if !prefixRE.MatchString(p) {
		return fmt.Errorf("%q: write a range as + and 1 to 12 digits (e.g. +234803)", p)
	}
	if _, ok := probeRange(rand.New(rand.NewPCG(1, 2)), p[1:]); !ok {
		return fmt.Errorf("%s makes no valid number", p)
	}
	return nil
}

// ipOf is the n-th client address (n from 1): distinct for 16 million.
func ipOf(n int) string {
	return fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
}
