package simulate

// A population's carriers (docs/simulate.md, "Carriers"): its new numbers
// are drawn from the ranges of the carriers it names, so that a scenario
// can put a pumping ring on the one carrier whose termination it shares,
// and real users spread over a country's carriers.

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/otpguard/otpguard/internal/guard"
)

// carrierProbes is how many valid numbers of a range name its carrier.
const carrierProbes = 24

// labelledRange is a range of a country's mobiles, the carrier
// guard.CarrierOf names for most of its numbers, and its share of the
// draws.
type labelledRange struct {
	numberRange
	carrier guard.Carrier
	weight  float64
}

// carrierOfNumber is guard.CarrierOf of an E.164 number.
func carrierOfNumber(e164 string) guard.Carrier {
	p, err := guard.ParsePhone(e164, "")
	if err != nil {
		return guard.Carrier{Name: guard.UnknownCarrier, Key: guard.UnknownCarrier}
	}
	return guard.CarrierOf(p)
}

// labelRanges labels the country's mobile ranges (s's three-digit leads)
// by their carriers. A lead whose probe numbers all name one carrier is
// that carrier's; one whose probes disagree is split one digit deeper,
// and each of its sub-ranges goes to the carrier most of its probes name
// (ties to the name first in order). A sub-range weighs its share of its
// lead, so a carrier's share of the draws is its share of the leads, as
// every lead weighs the same in a draw without carriers.
func (s *numberSource) labelRanges() []labelledRange {
	r := rand.New(rand.NewPCG(3, 4)) // the labels are the same in every run
	var out []labelledRange
	for _, nr := range s.ranges {
		seen := s.probeCarriers(r, nr)
		if len(seen) == 0 {
			continue
		}
		if len(seen) == 1 {
			out = append(out, labelledRange{numberRange: nr, carrier: majority(seen), weight: 1})
			continue
		}
		var subs []labelledRange
		for d := range 10 {
			sub := nr
			sub.lead = fmt.Sprintf("%s%d", nr.lead, d)
			if seen := s.probeCarriers(r, sub); len(seen) > 0 {
				subs = append(subs, labelledRange{numberRange: sub, carrier: majority(seen)})
			}
		}
		for i := range subs {
			subs[i].weight = 1 / float64(len(subs))
		}
		out = append(out, subs...)
	}
	return out
}

// probeCarriers counts the carriers of up to carrierProbes valid numbers
// of nr; none when nr makes none.
func (s *numberSource) probeCarriers(r *rand.Rand, nr numberRange) map[guard.Carrier]int {
	seen := map[guard.Carrier]int{}
	found := 0
	for range 4 * carrierProbes {
		if found == carrierProbes {
			break
		}
		if e, ok := nr.complete(r, nr.lengths[r.IntN(len(nr.lengths))], s.country); ok {
			seen[carrierOfNumber(e)]++
			found++
		}
	}
	return seen
}

// majority is the carrier most probes named; of a tie, the first by name.
func majority(seen map[guard.Carrier]int) guard.Carrier {
	all := slices.SortedFunc(maps.Keys(seen), func(a, b guard.Carrier) int {
		return cmp.Or(seen[b]-seen[a], strings.Compare(a.Name, b.Name))
	})
	return all[0]
}

// restrictToCarriers keeps only the ranges of the named carriers (matched
// by guard.CarrierKey, so "mtn" names MTN), and from then on draws only
// numbers guard.CarrierOf gives one of them. A name the country's ranges
// do not carry is an error that lists the ones they do.
func (s *numberSource) restrictToCarriers(country string, names []string) error {
	labelled := s.labelRanges()
	known := map[string]string{} // key -> display name
	for _, lr := range labelled {
		known[lr.carrier.Key] = lr.carrier.Name
	}
	want := map[string]bool{}
	for _, n := range names {
		k := guard.CarrierKey(n)
		if _, ok := known[k]; !ok {
			return fmt.Errorf("%q is not a carrier of %s (its mobile ranges name: %s)", n, country,
				strings.Join(slices.Sorted(maps.Values(known)), ", "))
		}
		want[k] = true
	}
	s.ranges, s.weights = nil, nil
	for _, lr := range labelled {
		if want[lr.carrier.Key] {
			s.ranges = append(s.ranges, lr.numberRange)
			s.weights = append(s.weights, lr.weight)
		}
	}
	s.carriers = want
	return nil
}

// drawOfCarriers returns a new valid number of one of s's carriers: a
// range picked by its weight, completed with random digits until
// guard.CarrierOf names one of the carriers (a range labelled by its
// majority holds a few numbers of another).
func (s *numberSource) drawOfCarriers(r *rand.Rand) string {
	var total float64
	for _, w := range s.weights {
		total += w
	}
	for {
		x, i := r.Float64()*total, 0
		for ; i < len(s.weights)-1 && x >= s.weights[i]; i++ {
			x -= s.weights[i]
		}
		nr := s.ranges[i]
		for range 100 {
			if e, ok := nr.complete(r, nr.lengths[r.IntN(len(nr.lengths))], s.country); ok && s.carriers[carrierOfNumber(e).Key] {
				return e
			}
		}
	}
}

// validateCarriers checks p's carriers: of its country's ranges, and
// not with prefixes.
func (p *Population) validateCarriers() error {
	switch {
	case len(p.Carriers) == 0:
		return nil
	case len(p.Prefixes) > 0:
		return fmt.Errorf("give carriers or prefixes, not both (prefixes are ranges already)")
	case !knownCountry(p.Country) || p.Country == internationalC:
		return nil // the country's own error says it
	}
	_, err := populationSource(p)
	return err
}
