package httpapi_test

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/html"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// parsePage parses an ops page as a browser without JavaScript does (so
// the content of <noscript> is markup, not text).
func parsePage(t *testing.T, body []byte) *html.Node {
	t.Helper()
	doc, err := html.ParseWithOptions(bytes.NewReader(body), html.ParseOptionEnableScripting(false))
	if err != nil {
		t.Fatalf("parsing the page: %v", err)
	}
	return doc
}

// findAll returns the elements under n that match, in document order.
func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && match(d) {
			out = append(out, d)
		}
	}
	return out
}

// findOne returns the one element under n that matches, or nil when none
// does; more than one fails the test.
func findOne(t *testing.T, n *html.Node, what string, match func(*html.Node) bool) *html.Node {
	t.Helper()
	all := findAll(n, match)
	if len(all) > 1 {
		t.Fatalf("%d elements are %s, want at most one", len(all), what)
	}
	if len(all) == 0 {
		return nil
	}
	return all[0]
}

func htmlAttr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func hasAttr(key, val string) func(*html.Node) bool {
	return func(n *html.Node) bool { v, ok := htmlAttr(n, key); return ok && v == val }
}

func hasClass(class string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		v, _ := htmlAttr(n, "class")
		return slices.Contains(strings.Fields(v), class)
	}
}

func tag(name string, and ...func(*html.Node) bool) func(*html.Node) bool {
	return func(n *html.Node) bool {
		if n.Data != name {
			return false
		}
		for _, m := range and {
			if !m(n) {
				return false
			}
		}
		return true
	}
}

func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.TrimSpace(b.String())
}

// pageEvent is one row of the page's event table, by its cells' labels.
type pageEvent map[string]string

// eventTable reads the rows of the events section.
func eventTable(t *testing.T, doc *html.Node) []pageEvent {
	t.Helper()
	sec := findOne(t, doc, "#events", tag("section", hasAttr("id", "events")))
	if sec == nil {
		t.Fatal("the page has no events section")
	}
	var out []pageEvent
	for _, tr := range findAll(sec, tag("tr", hasClass("event-row"))) {
		row := pageEvent{}
		for _, td := range findAll(tr, tag("td")) {
			if l, ok := htmlAttr(td, "data-label"); ok {
				row[l] = text(td)
			}
		}
		out = append(out, row)
	}
	return out
}

// linkByID is the href of the link with the id, "" when there is none.
func linkByID(t *testing.T, doc *html.Node, id string) string {
	t.Helper()
	a := findOne(t, doc, "#"+id, tag("a", hasAttr("id", id)))
	if a == nil {
		return ""
	}
	href, _ := htmlAttr(a, "href")
	return href
}

// opsPageGet fetches a page URL the page itself linked to (its fragment
// dropped) with the ops key and parses it.
func opsPageGet(t *testing.T, oc *opsCluster, path string) *html.Node {
	t.Helper()
	path, _, _ = strings.Cut(path, "#")
	r := oc.ops(t, 0, "GET", path, "")
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	return parsePage(t, r.Body)
}

// eventsSet is the known set of events the page tests read: n events a
// minute apart, ending an hour ago, over four number ranges in three
// countries, sends and verifications with several outcomes.
func eventsSet(n int) (base time.Time, events []guard.Event) {
	base = time.Now().UTC().Truncate(time.Minute).Add(-time.Duration(n)*time.Minute - time.Hour)
	phones := []struct{ phone, country string }{
		{"+9198000%05d", "IN"}, {"+9188000%05d", "IN"}, {"+44770090%04d", "GB"}, {"+2348030%05d", "NG"},
	}
	for i := range n {
		e := guard.Event{At: base.Add(time.Duration(i) * time.Minute), Action: guard.ActionOTPSend,
			Phone: fmt.Sprintf(phones[i%4].phone, i), Country: phones[i%4].country, Detail: fmt.Sprintf("ev%03d", i)}
		switch {
		case i%5 == 0:
			e.Action, e.Outcome = guard.ActionOTPVerify, []string{"valid", "wrong_code"}[i/5%2]
		case i%3 == 0:
			e.Outcome = "phone_rate_limited"
		case i%3 == 1:
			e.Outcome = "sent"
		default:
			e.Outcome = "cooldown"
		}
		events = append(events, e)
	}
	return base, events
}

// TestOpsPageEventFilters: with a known set of events in the database,
// each filter of the page's event list (action, outcome, number or
// prefix, country, time, and together) lists exactly the events it
// should, newest first, and paging through "older" links lists each once,
// in 25s, ending on the last event (no empty page after a full one).
func TestOpsPageEventFilters(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	base, events := eventsSet(130)
	if err := oc.nodes[0].db.WriteEvents(t.Context(), events); err != nil {
		t.Fatal(err)
	}
	minute := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }
	browserTime := func(i int) string { return minute(i).Format("2006-01-02T15:04") }

	tests := []struct {
		name  string
		query url.Values
		want  func(i int, e guard.Event) bool
		pages []int
	}{
		{"no filter", url.Values{}, func(int, guard.Event) bool { return true }, []int{25, 25, 25, 25, 25, 5}},
		{"action", url.Values{"action": {"otp.verify"}},
			func(_ int, e guard.Event) bool { return e.Action == guard.ActionOTPVerify }, []int{25, 1}},
		{"outcome", url.Values{"outcome": {"phone_rate_limited"}},
			func(_ int, e guard.Event) bool { return e.Outcome == "phone_rate_limited" }, []int{25, 10}},
		{"prefix", url.Values{"number": {"+9198"}},
			func(i int, _ guard.Event) bool { return i%4 == 0 }, []int{25, 8}},
		{"whole number", url.Values{"number": {events[6].Phone}},
			func(i int, _ guard.Event) bool { return i == 6 }, []int{1}},
		{"country as typed", url.Values{"ev_country": {" in "}},
			func(_ int, e guard.Event) bool { return e.Country == "IN" }, []int{25, 25, 16}},
		{"from and to", url.Values{"since": {browserTime(30)}, "until": {minute(90).Format(time.RFC3339)}},
			func(i int, _ guard.Event) bool { return i >= 30 && i < 90 }, []int{25, 25, 10}},
		{"exactly one page", url.Values{"ev_country": {"IN"}, "since": {browserTime(81)}},
			func(i int, e guard.Event) bool { return i >= 81 && e.Country == "IN" }, []int{25}},
		{"all together", url.Values{"action": {"otp.send"}, "outcome": {"sent"}, "number": {"+44"}, "ev_country": {"GB"},
			"since": {browserTime(10)}, "until": {browserTime(120)}},
			func(i int, e guard.Event) bool {
				return i >= 10 && i < 120 && e.Action == guard.ActionOTPSend && e.Outcome == "sent" && e.Country == "GB"
			}, []int{8}},
		{"nothing matches", url.Values{"number": {"+1"}}, func(int, guard.Event) bool { return false }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []string
			for i := len(events) - 1; i >= 0; i-- {
				if tt.want(i, events[i]) {
					want = append(want, events[i].Detail)
				}
			}
			first := "/ops"
			if len(tt.query) > 0 {
				first += "?" + tt.query.Encode()
			}
			var (
				got   []string
				pages []int
				top   []pageEvent
			)
			for next := first; next != ""; {
				if len(pages) > len(events) {
					t.Fatal("paging does not end")
				}
				doc := opsPageGet(t, oc, next)
				rows := eventTable(t, doc)
				if len(pages) == 0 {
					top = rows
					if l := linkByID(t, doc, "events-newest"); l != "" {
						t.Errorf("the first page links to the newest page (%s)", l)
					}
				} else if newest := linkByID(t, doc, "events-newest"); newest == "" {
					t.Errorf("page %d has no link back to the newest page", len(pages)+1)
				} else if diff := cmp.Diff(top, eventTable(t, opsPageGet(t, oc, newest))); diff != "" {
					t.Errorf("page %d: the newest link (%s) is not the first page (-first +newest):\n%s", len(pages)+1, newest, diff)
				}
				pages = append(pages, len(rows))
				for _, r := range rows {
					got = append(got, r["Detail"])
				}
				next = linkByID(t, doc, "events-older")
			}
			if len(want) == 0 {
				want, pages = nil, nil // an empty list is one page without rows
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events across pages of %s, newest first (-want +got):\n%s", first, diff)
			}
			if diff := cmp.Diff(tt.pages, pages); diff != "" {
				t.Errorf("rows per page of %s (-want +got):\n%s", first, diff)
			}
		})
	}

	// A page older than the oldest event (its events pruned since it was
	// linked) says so and leads back to the newest.
	doc := opsPageGet(t, oc, "/ops?ev_country=IN&before=1")
	if n := findOne(t, doc, "#no-events", tag("p", hasAttr("id", "no-events"))); n == nil || text(n) != "No older events match the filter." {
		t.Errorf("a page past the oldest event: %v, want it to say no older events match", n)
	}
	if l := linkByID(t, doc, "events-newest"); l != "/ops?ev_country=IN#events" {
		t.Errorf("a page past the oldest event links to the newest as %q, want /ops?ev_country=IN#events", l)
	}

	// The rows show the events themselves.
	rows := eventTable(t, opsPageGet(t, oc, "/ops?number="+url.QueryEscape(events[6].Phone)))
	e := events[6]
	want := []pageEvent{{"Time": e.At.Format("2006-01-02 15:04:05"), "Action": e.Action, "Outcome": e.Outcome, "Number": e.Phone,
		"Country": e.Country, "IP": "", "Actor": "", "Detail": e.Detail, "Request": ""}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("the row of %s (-want +got):\n%s", e.Phone, diff)
	}
}

// eventForm reads the values of the event filter's inputs, by name.
func eventForm(t *testing.T, doc *html.Node) map[string]string {
	t.Helper()
	form := findOne(t, doc, "#event-filter", tag("form", hasAttr("id", "event-filter")))
	if form == nil {
		t.Fatal("the page has no event filter")
	}
	out := map[string]string{}
	for _, in := range findAll(form, tag("input")) {
		name, _ := htmlAttr(in, "name")
		out[name], _ = htmlAttr(in, "value")
	}
	return out
}

// TestOpsPageEventFilterKeepsWhatWasTyped: the filter form shows what was
// typed, whether the filter was used or refused; a refused field is named
// and no events are listed as if it matched.
func TestOpsPageEventFilterKeepsWhatWasTyped(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	_, events := eventsSet(10)
	if err := oc.nodes[0].db.WriteEvents(t.Context(), events); err != nil {
		t.Fatal(err)
	}
	typed := map[string]string{"action": "otp.send", "outcome": "sent", "number": "+9198", "ev_country": "in",
		"since": "2026-03-01T12:00", "until": "2026-03-01T13:00:00Z", "service": ""}
	tests := []struct {
		name    string
		change  map[string]string
		refusal string // the field the page names, "" when it filters
	}{
		{"used", nil, ""},
		{"bad number", map[string]string{"number": "98 00x"}, "Number or prefix"},
		{"bad country", map[string]string{"ev_country": "IND"}, "Country"},
		{"bad time", map[string]string{"since": "yesterday"}, "From"},
		{"bad outcome", map[string]string{"outcome": "<b>sent</b>"}, "Outcome"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := url.Values{}
			want := map[string]string{}
			for k, v := range typed {
				q.Set(k, v)
				want[k] = v
			}
			for k, v := range tt.change {
				q.Set(k, v)
				want[k] = v
			}
			doc := opsPageGet(t, oc, "/ops?"+q.Encode())
			if diff := cmp.Diff(want, eventForm(t, doc)); diff != "" {
				t.Errorf("the filter's inputs (-typed +shown):\n%s", diff)
			}
			msg := ""
			if n := findOne(t, doc, "#events-error", tag("p", hasAttr("id", "events-error"))); n != nil {
				msg = text(n)
			}
			switch {
			case tt.refusal == "" && msg != "":
				t.Errorf("the filter was refused: %q", msg)
			case tt.refusal != "" && !strings.HasPrefix(msg, tt.refusal+":"):
				t.Errorf("the refusal %q does not name the field %q", msg, tt.refusal)
			}
			if rows := eventTable(t, doc); tt.refusal != "" && len(rows) != 0 {
				t.Errorf("a refused filter lists %d events", len(rows))
			}
		})
	}
}

// TestOpsPageRefusalNamesItsLimit: a send refused by a limit is listed
// with the limit it met and how far past it the number went, from real
// sends through the whole path (guard, audit queue, SQL, page).
func TestOpsPageRefusalNamesItsLimit(t *testing.T) {
	pol := defaults()
	pol.OTP.Cooldown = 0
	pol.OTP.PerPhone = guard.Window{Limit: 3, Window: 10 * time.Minute}
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: &pol})
	const phone = "+14155550100"
	for i := range 5 {
		status, code := oc.send(t, 0, phone)
		if want := map[bool]int{true: 200, false: 429}[i < 3]; status != want {
			t.Fatalf("send %d: %d %s, want %d", i+1, status, code, want)
		}
	}
	opsWait(t, "the 5 sends' events", func() bool { return len(oc.eventsIn(t, phone)) == 5 })

	rows := eventTable(t, opsPageGet(t, oc, "/ops?outcome=phone_rate_limited"))
	var got []string
	for _, r := range rows {
		got = append(got, r["Number"]+" "+r["Detail"])
	}
	// Newest first: the 5th send was refused as the 5th of 3, the 4th as the 4th.
	want := []string{phone + " 5 of 3 per 10m", phone + " 4 of 3 per 10m"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refused sends on the page (-want +got):\n%s", diff)
	}
}
