package ops

// The attack view's rows: a window's hours summed into its top countries
// and prefixes, each with the limit in force on it.

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// window sums the counts of hours into the top rows, each with the limit
// that applies to it now (e) and whether the solved cap refused it in the
// hour under way (spent: countries, spentCarriers: "<region>|<key>").
func window(name string, hours []AbuseHour, since time.Time, top int, p guard.OTPPolicy, e guard.Enforced,
	spent, spentCarriers map[string]bool) AbuseWindow {
	w := AbuseWindow{Name: name, Since: since}
	countries := map[string]*CountryRow{}
	prefixes := map[string]*PrefixRow{}
	carriers := map[string]map[string]*CarrierRow{}
	depths := p.PrefixLimits()
	for _, h := range hours {
		addCountries(countries, &w.Total, h.Countries)
		addPrefixes(prefixes, h.Prefixes, depths, e)
		addCarriers(carriers, h.Carriers)
	}
	for _, r := range countries {
		r.Limits = append(r.Limits, countryLimits(r.Country, e)...)
		if until, ok := e.CountryPause(r.Country); ok && r.Country != OtherField {
			r.PausedUntil = until
		}
		r.SolvedCapSpent = spent[r.Country]
		w.Countries = append(w.Countries, *r)
	}
	for region, rows := range carriers {
		for key, r := range rows {
			r.SolvedCapSpent = spentCarriers[region+"|"+key]
		}
	}
	for _, r := range prefixes {
		w.Prefixes = append(w.Prefixes, *r)
	}
	sortRows(w.Countries, w.Prefixes)
	w.CountriesTotal, w.PrefixesTotal = len(w.Countries), len(w.Prefixes)
	w.Countries = w.Countries[:min(top, len(w.Countries))]
	w.Prefixes = w.Prefixes[:min(top, len(w.Prefixes))]
	attachCarriers(w.Countries, carriers, e)
	return w
}

// addCountries adds one hour's country fields ("<region>|<kind>") to their
// rows and to total.
func addCountries(rows map[string]*CountryRow, total *AbuseTally, fields map[string]int64) {
	for f, n := range fields {
		region, kind, ok := strings.Cut(f, "|")
		if !ok {
			continue
		}
		r := rows[region]
		if r == nil {
			r = &CountryRow{Country: region}
			rows[region] = r
		}
		r.add(kind, n)
		total.add(kind, n)
	}
}

// addPrefixes adds one hour's prefix fields ("<prefix>|<country>|<depth>|
// <kind>", or "~other|<kind>") to their rows; a new row gets the limit in
// force (e) of its depth.
func addPrefixes(rows map[string]*PrefixRow, fields map[string]int64, depths []guard.PrefixWindow, e guard.Enforced) {
	for f, n := range fields {
		parts := strings.Split(f, "|")
		key, row, ok := prefixRow(parts)
		if !ok {
			continue
		}
		r := rows[key]
		if r == nil {
			r = &row
			if row.Depth >= 0 && row.Depth < len(depths) {
				if l := e.Prefix(row.Prefix, depths[row.Depth]); l.Limit > 0 {
					r.Limit = AbuseLimit{Rule: depthRule(row.Depth), Limit: l.Limit, Window: l.Window, Override: l.Override}
				}
			}
			rows[key] = r
		}
		r.add(parts[len(parts)-1], n)
	}
}

// prefixRow is the row a prefix field's parts count in, and its key.
func prefixRow(parts []string) (key string, row PrefixRow, ok bool) {
	switch {
	case len(parts) == 2 && parts[0] == OtherField:
		return OtherField, PrefixRow{Prefix: OtherField, Depth: -1}, true
	case len(parts) == 4:
		depth, err := strconv.Atoi(parts[2])
		if err != nil {
			return "", PrefixRow{}, false
		}
		return parts[0] + "|" + parts[2], PrefixRow{Prefix: parts[0], Country: parts[1], Depth: depth}, true
	}
	return "", PrefixRow{}, false
}

// countryLimits is the per-country limit in force (e) for country, if any.
func countryLimits(country string, e guard.Enforced) []AbuseLimit {
	if country == OtherField {
		return nil
	}
	l, key := e.Country(country)
	if l.Limit <= 0 {
		return nil
	}
	rule := "per_country" // the country's own, or only an override's
	if key == "*" {
		rule = `per_country["*"]`
	}
	return []AbuseLimit{{Rule: rule, Limit: l.Limit, Window: l.Window, Override: l.Override}}
}

// sortRows puts the busiest rows (sends + refusals) first, ties by name.
func sortRows(countries []CountryRow, prefixes []PrefixRow) {
	busy := func(t AbuseTally) int64 { return t.Sends + t.Refusals }
	slices.SortFunc(countries, func(a, b CountryRow) int {
		if c := busy(b.AbuseTally) - busy(a.AbuseTally); c != 0 {
			return sign(c)
		}
		return strings.Compare(a.Country, b.Country)
	})
	slices.SortFunc(prefixes, func(a, b PrefixRow) int {
		if c := busy(b.AbuseTally) - busy(a.AbuseTally); c != 0 {
			return sign(c)
		}
		if c := strings.Compare(a.Prefix, b.Prefix); c != 0 {
			return c
		}
		return a.Depth - b.Depth
	})
}

func sign(n int64) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func depthRule(depth int) string {
	if depth == 0 {
		return "per_prefix"
	}
	return "prefix_depths[" + strconv.Itoa(depth-1) + "]"
}
