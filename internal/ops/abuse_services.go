package ops

import (
	"slices"
	"strings"

	"github.com/otpguard/otpguard/internal/guard"
)

// The attack view's services (GET /ops/abuse, "services" of each window):
// each tenant of the policy file's services: section, and the default
// service, with its sends, refusals and verifications per country, so
// that an attack on one service's users shows as that service's rows.
// The recorder counts them from the events' Service (the service's SID,
// "" the default service's) only while the policy file names services: a
// deployment without any keeps the hashes it had.

// DefaultServiceField is the default service's name in the counters (a
// SID never starts with "~").
const DefaultServiceField = "~default"

// serviceKind reports whether the service rows count kind: sends,
// refusals (and by code) and verifications.
func serviceKind(kind string) bool {
	return kind == "s" || kind == "v" || kind == "r" || strings.HasPrefix(kind, "r:")
}

// serviceField is the name sid counts under, and whether the services
// are counted at all (the policy names some). A SID that is not a Verify
// service SID (none reaches an event: the routes take only the file's)
// is not counted, so the hash holds only names the file gave.
func (a *AbuseRecorder) serviceField(sid string) (string, bool) {
	if a.o.Services == nil || len(a.o.Services()) == 0 {
		return "", false
	}
	if sid == guard.DefaultService {
		return DefaultServiceField, true
	}
	return sid, guard.ValidSID(sid, "VA")
}

// ServiceRow is one service in a window: its totals and its countries.
type ServiceRow struct {
	// Service is the SID; "" for the default service.
	Service string
	// FriendlyName is the policy file's name for it ("" when the file no
	// longer names it); the default service's is that of the service
	// marked default, if any.
	FriendlyName string
	AbuseTally
	// Countries are its busiest countries (at most the view's top; the
	// rest are in CountriesTotal), "~other" its countries past the cap.
	Countries      []ServiceCountry
	CountriesTotal int
}

// ServiceCountry is one country of a service in a window.
type ServiceCountry struct {
	Country string
	AbuseTally
}

// serviceRows sums hours' service fields ("<service>|<region>|<kind>")
// into one row per service: the default service first, then each service
// of services in the file's order (listed even with no traffic), then any
// the hours hold that the file no longer names, by SID. None when the file
// names no service.
func serviceRows(hours []AbuseHour, services []guard.Service, top int) []ServiceRow {
	if len(services) == 0 {
		return nil
	}
	rows := []*ServiceRow{{Service: guard.DefaultService}}
	index := map[string]*ServiceRow{DefaultServiceField: rows[0]}
	for _, s := range services {
		if s.Default {
			rows[0].FriendlyName = s.FriendlyName
			continue
		}
		if index[s.SID] == nil {
			r := &ServiceRow{Service: s.SID, FriendlyName: s.FriendlyName}
			rows = append(rows, r)
			index[s.SID] = r
		}
	}
	named := len(rows)
	countries := map[*ServiceRow]map[string]*ServiceCountry{}
	for _, h := range hours {
		for f, n := range h.Services {
			parts := strings.Split(f, "|")
			if len(parts) != 3 {
				continue
			}
			r := index[parts[0]]
			if r == nil {
				r = &ServiceRow{Service: parts[0]}
				rows = append(rows, r)
				index[parts[0]] = r
			}
			if countries[r] == nil {
				countries[r] = map[string]*ServiceCountry{}
			}
			c := countries[r][parts[1]]
			if c == nil {
				c = &ServiceCountry{Country: parts[1]}
				countries[r][parts[1]] = c
			}
			c.add(parts[2], n)
			r.add(parts[2], n)
		}
	}
	slices.SortFunc(rows[named:], func(a, b *ServiceRow) int { return strings.Compare(a.Service, b.Service) })
	out := make([]ServiceRow, 0, len(rows))
	busy := func(t AbuseTally) int64 { return t.Sends + t.Refusals }
	for _, r := range rows {
		for _, c := range countries[r] {
			r.Countries = append(r.Countries, *c)
		}
		slices.SortFunc(r.Countries, func(a, b ServiceCountry) int {
			if c := busy(b.AbuseTally) - busy(a.AbuseTally); c != 0 {
				return sign(c)
			}
			return strings.Compare(a.Country, b.Country)
		})
		r.CountriesTotal = len(r.Countries)
		r.Countries = r.Countries[:min(top, len(r.Countries))]
		out = append(out, *r)
	}
	return out
}
