package guard

import (
	"slices"

	"github.com/nyaruka/phonenumbers"
)

// Regions are the ISO 3166 regions libphonenumber knows, sorted: the
// values a country label of a metric can take (besides "other").
func Regions() []string {
	var out []string
	for r := range phonenumbers.GetSupportedRegions() {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// region is the region a number counts in for the rules kept per
// country: its own, or "001" for non-geographic numbers.
func region(p Phone) string {
	if p.Region == "" {
		return "001" // non-geographic numbers (+800, +882...)
	}
	return p.Region
}
