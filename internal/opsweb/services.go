package opsweb

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// DefaultServiceParam is the service filter of GET /ops/events and the
// page's event filter that selects the default service's events (those
// that name no service), as a SID selects a service's.
const DefaultServiceParam = "default"

// defaultNote is the row of the default service when no service of the
// policy file is marked default: the API keys act for it, and it has no
// SID, account or credential of its own.
const defaultNote = "the deployment's default service: the API keys (OTPGUARD_API_KEYS) act for it; no service of the policy file is marked default"

// markedDefaultNote is the row of the service marked default.
const markedDefaultNote = "the default service: the API keys (OTPGUARD_API_KEYS) act for it too"

// serviceItem is one service as GET /ops/services shows it: what names
// it and which credentials act for it, by SID. Never a secret, its file
// or its digest.
type serviceItem struct {
	// SID is "" for the default service when the file marks none.
	SID            string   `json:"sid"`
	FriendlyName   string   `json:"friendly_name"`
	AccountSID     string   `json:"account_sid"`
	Default        bool     `json:"default"`
	CredentialSIDs []string `json:"credential_sids"`
	Note           string   `json:"note,omitempty"`
}

type servicesResponse struct {
	Services []serviceItem `json:"services"`
}

// serviceList is the services in force as the desk lists them: the
// default service first (the file's, or the deployment's own when the
// file marks none), then the others in the policy file's order.
func serviceList(services []guard.Service) []serviceItem {
	out := make([]serviceItem, 0, len(services)+1)
	var others []serviceItem
	for _, s := range services {
		it := serviceItem{SID: s.SID, FriendlyName: s.FriendlyName, AccountSID: s.AccountSID, Default: s.Default,
			CredentialSIDs: make([]string, 0, len(s.Credentials))}
		for _, c := range s.Credentials {
			it.CredentialSIDs = append(it.CredentialSIDs, c.SID)
		}
		if s.Default {
			it.Note = markedDefaultNote
			out = append(out, it)
			continue
		}
		others = append(others, it)
	}
	if len(out) == 0 {
		out = append(out, serviceItem{FriendlyName: "Default service", Default: true, CredentialSIDs: []string{}, Note: defaultNote})
	}
	return append(out, others...)
}

// ListServices: GET /ops/services. The Verify services in force (the
// policy file's services:), the default service first; a deployment
// that names none lists the default service alone. Read from the policy
// in force, not the database: it answers while the database is down.
func (s *API) ListServices(c echo.Context) error {
	var services []guard.Service
	if s.services != nil {
		services = s.services()
	}
	return c.JSON(http.StatusOK, servicesResponse{Services: serviceList(services)})
}

// pageService is one row of the page's services: the service, its day's
// sends and verified checks, and the link to its events.
type pageService struct {
	serviceItem
	Sends, Verified int64
	// EventsURL lists its events (service=default for the default
	// service's, whose events carry no SID).
	EventsURL string
}

// servicesSection is the page's services (templates/services.html).
type servicesSection struct {
	Rows []pageService
	// CountsErr says why the counts are not shown (the database).
	CountsErr string
	Hours     int
}

// loadServices reads the services in force and, through dbPart (the
// page's reader of database parts), each one's day from the audit trail.
func (s *Pages) loadServices(c echo.Context, p *opsPage, dbPart func(string, func() error) string) {
	var services []guard.Service
	if s.services != nil {
		services = s.services()
	}
	sec := servicesSection{Hours: int(ops.ServiceWindow.Hours())}
	var counts map[string]ops.ServiceCount
	sec.CountsErr = dbPart("the services' counts", func() (err error) {
		counts, err = s.ops.ServiceCounts(c.Request().Context())
		return err
	})
	for _, it := range serviceList(services) {
		row := pageService{serviceItem: it}
		owner := it.SID
		sel := it.SID
		if it.Default {
			owner, sel = guard.DefaultService, DefaultServiceParam
		}
		row.EventsURL = "/ops?" + url.Values{"service": {sel}}.Encode() + "#events"
		row.Sends, row.Verified = counts[owner].Sends, counts[owner].Verified
		sec.Rows = append(sec.Rows, row)
	}
	p.Sections["services"] = sec
}

// serviceSIDs are the owners of the named services in force (none
// without services), whose codes the desk reads and an unblock clears
// beside the default service's. A service marked default is left out:
// its codes are the default service's.
func serviceSIDs(services func() []guard.Service) []string {
	if services == nil {
		return nil
	}
	var out []string
	for _, s := range services() {
		if o := s.Owner(); o != guard.DefaultService {
			out = append(out, o)
		}
	}
	return out
}
