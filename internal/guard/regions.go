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
