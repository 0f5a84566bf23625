package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// realReport is the report of testdata/report-scenario.yaml (shared)
// and its JSON, decoded.
func realReport(t *testing.T) (*Report, jsonReport) {
	t.Helper()
	rep := shared(t, "report-scenario.yaml")
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc jsonReport
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return rep, doc
}

// jsonReport is the JSON report as a script reads it.
type jsonReport struct {
	Populations map[string]Counts
	Hours       []struct {
		Hour        int
		Populations map[string]Counts
	}
	Summary map[string]float64
}

// wideReport is a report as wide as a scenario within Parse's limits
// makes it: names of 40 characters, the busiest rate (maxPerMinute) for
// the longest campaign (30 days), every try refused by each of many
// codes, lookups and carriers.
func wideReport(t *testing.T) *Report {
	t.Helper()
	long := strings.Repeat("N", 35) + " ring"
	s := &Scenario{Start: time.Date(2026, 3, 2, 18, 0, 0, 0, time.UTC), Duration: Duration(maxDuration), LookupPrice: 0.01,
		Populations: []Population{{Name: long, Role: RoleAttacker, Carriers: []string{"9mobile"}}, {Name: strings.Repeat("U", 40)}}}
	rep := newReport(s)
	const n = 60 * maxPerMinute // an hour's tries
	for h := range rep.Hours {
		for _, name := range rep.order {
			for _, c := range rep.counts(s, name, rep.Hours[h].Start) {
				c.Tried, c.Sent, c.Challenged, c.Refused, c.Verified = c.Tried+n, c.Sent+n, c.Challenged+n, c.Refused+n, c.Verified+n
				c.Returning, c.ReturningChallenged, c.ReturningRefused = c.Returning+n, c.ReturningChallenged+n, c.ReturningRefused+n
				c.Cost += n * 0.99
				c.Lookups += n
				for _, code := range []string{"unusual_volume", "budget_exhausted", "high_risk_number", "country_paused",
					"challenge_cap_reached", "phone_rate_limited", "ip_rate_limited", "cooldown", "denied", "carrier_paused"} {
					c.RefusedByCode[code] += n
				}
				c.ofCarrier("Vodafone Idea Limited").Tried += n
			}
		}
	}
	rep.roundCosts(s.LookupPrice)
	rep.summarise(s)
	return rep
}

// TestTableFitsTerminal renders a real report and a wide one: every
// line fits 100 columns, and the summary comes first, its figures
// those of the JSON.
func TestTableFitsTerminal(t *testing.T) {
	rep, doc := realReport(t)
	for name, r := range map[string]*Report{"report-scenario.yaml": rep, "a wide report": wideReport(t)} {
		var out strings.Builder
		if err := r.WriteTable(&out); err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(out.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > tableWidth {
				t.Errorf("%s: line %d is %d columns, want at most %d:\n%s", name, i+1, n, tableWidth, line)
			}
		}
		if name != "a wide report" {
			t.Logf("%s:\n%s", name, out.String())
		}
	}

	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	firstHour := strings.Index(text, "by hour")
	for _, name := range rep.order {
		c := doc.Populations[name]
		role := RoleUser
		if name == "NG bot" {
			role = RoleAttacker
		}
		want := fmt.Sprintf("%s %s %d %d %d (%s) %.2f", name, role, c.Tried, c.Sent, c.Tried-c.Sent, percent(c.Tried-c.Sent, c.Tried), c.Cost)
		at := -1
		for _, line := range strings.Split(text, "\n") {
			if strings.Join(strings.Fields(line), " ") == want {
				at = strings.Index(text, line)
				break
			}
		}
		if at < 0 || at > firstHour {
			t.Errorf("the summary's row of %s: want %q before the hours (at %d, hours at %d):\n%s", name, want, at, firstHour, text)
		}
	}
	s := doc.Summary
	for _, want := range []string{
		fmt.Sprintf("real users without a code: %v of %v (%s)", s["users_without_code"], s["users_tried"],
			percent(int(s["users_without_code"]), int(s["users_tried"]))),
		fmt.Sprintf("attackers' SMS: %v of %v tried", s["attackers_sent"], s["attackers_tried"]),
	} {
		if at := strings.Index(text, want); at < 0 || at > firstHour {
			t.Errorf("want %q before the hours:\n%s", want, text)
		}
	}
	if doc.Populations["GB users"].Refused == 0 || doc.Populations["NG bot"].Challenged == 0 {
		t.Errorf("report-scenario.yaml: want GB users refused and NG bot challenged, got %+v", doc.Populations)
	}
}

// TestWrap lays a list out in lines of a width, each break after a
// comma, the lines after the first under the first item.
func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		items []string
		width int
		want  []string
	}{
		{nil, 20, []string{"codes: -"}},
		{[]string{"a 1", "b 2"}, 20, []string{"codes: a 1, b 2"}},
		{[]string{"aaaa 1", "bbbb 2", "cccc 3"}, 20, []string{"codes: aaaa 1,", "       bbbb 2,", "       cccc 3"}},
		{[]string{"a 1", "bb 2"}, 16, []string{"codes: a 1,", "       bb 2"}},
		{[]string{"a 1", "bb 2"}, 17, []string{"codes: a 1, bb 2"}},
	} {
		got := wrap("codes: ", tc.items, tc.width)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("wrap(%v, %d): got %q, want %q", tc.items, tc.width, got, tc.want)
		}
	}
}
