package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// postPage posts a form of the page to instance i with the ops key and
// returns the answer without following its redirect.
func postPage(t *testing.T, oc *opsCluster, i int, path, contentType string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", oc.instances[i].srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+opsKey)
	req.Header.Set("Content-Type", contentType)
	client := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res
}

// TestOpsPageTrustImport: the page's import takes pasted numbers and a
// CSV file together, hands them to the API's import (its validation, its
// limit, its audit event) and says what it did; a refusal is said beside
// the form; a body past the import's limit is 413.
func TestOpsPageTrustImport(t *testing.T) {
	oc, _ := trustWorld(t)
	multi := func(text, file string) (string, []byte) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		_ = w.WriteField("numbers", text)
		if file != "" {
			f, err := w.CreateFormFile("file", "trusted.csv")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.Write([]byte(file))
		}
		_ = w.Close()
		return w.FormDataContentType(), b.Bytes()
	}
	many := strings.Repeat("+447400123456\n", guard.MaxTrustImport+1)
	form := "application/x-www-form-urlencoded"
	tests := []struct {
		name, contentType string
		body              []byte
		status            int
		location, flash   string
	}{
		{"pasted and a file", "", nil, 303, "/ops?done=trusted&imported=4&invalid=2#trust-import",
			"Imported 4 trusted numbers; 2 not valid numbers were left out."},
		{"pasted only, no file part", form, []byte(url.Values{"numbers": {"+447400123470, +447400123471"}}.Encode()), 303,
			"/ops?done=trusted&imported=2&invalid=0#trust-import", "Imported 2 trusted numbers."},
		{"nothing", form, []byte("numbers=+%0A"), 303, "/ops?trust_err=invalid_request#trust-import", ""},
		{"past the import's count", form, []byte(url.Values{"numbers": {many}}.Encode()), 303, "/ops?trust_err=invalid_request#trust-import", ""},
		{"past the body limit", form, []byte("numbers=" + strings.Repeat("%2B447400123456%0A", 35000)), 413, "", ""},
	}
	tests[0].contentType, tests[0].body = multi("+447400123456\n+447400123457, x", "phone\n+447400123458\n+919812345678\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := postPage(t, oc, 0, "/ops/actions/trust-import", tt.contentType, tt.body)
			if res.StatusCode != tt.status || res.Header.Get("Location") != tt.location {
				t.Fatalf("got %d to %q, want %d to %q", res.StatusCode, res.Header.Get("Location"), tt.status, tt.location)
			}
			if tt.location == "" {
				return
			}
			page := string(oc.ops(t, 0, "GET", strings.TrimSuffix(tt.location, "#trust-import"), "").Body)
			if tt.flash != "" && !strings.Contains(page, `<p class="flash ok" id="flash">`+tt.flash+`</p>`) {
				t.Errorf("the page does not say %q", tt.flash)
			}
			if tt.flash == "" && !strings.Contains(page, `id="trust-problem"`) {
				t.Errorf("the page does not say why the import was refused")
			}
		})
	}
	opsWait(t, "the page's imports in the audit trail", func() bool {
		r := oc.ops(t, 0, "GET", "/ops/events?action=otp.trust.import", "")
		return r.Status == 200 && containsAll(string(r.Body), "imported=4 invalid=2", "imported=2 invalid=0")
	})
}

// TestOpsPageBudgetOffSaysWhatWasSent: with no spend budget the budget
// cards say "off" and how many codes the window sent, not "0 sent".
func TestOpsPageBudgetOffSaysWhatWasSent(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	for _, phone := range []string{"+447400123456", "+447400123457", "+447400123458"} {
		if status, code := oc.send(t, 0, phone); status != 200 {
			t.Fatalf("send %s: %d %s", phone, status, code)
		}
	}
	if err := oc.instances[0].app.FlushAbuse(context.Background()); err != nil {
		t.Fatal(err)
	}
	page := oc.ops(t, 0, "GET", "/ops", "").Body
	for _, w := range []string{"hour", "day"} {
		card := regexp.MustCompile(`(?s)<div class="card budget *" data-window="Spend budget, ` + w + `">.*?</div>\s*</div>`).Find(page)
		text := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(string(card), "")
		if !strings.Contains(text, "off") || !strings.Contains(text, "3 sent since") {
			t.Errorf("the %s budget's card: %q, want off and 3 sent", w, strings.Join(strings.Fields(text), " "))
		}
	}
}

// TestOpsPageRedisDown: with Redis gone the page keeps this instance's
// health line and says which figures it cannot show; the blocked numbers'
// count is unknown, not 0.
func TestOpsPageRedisDown(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, ownRedis: true})
	if status, code := oc.send(t, 0, "+447400123456"); status != 200 {
		t.Fatalf("send: %d %s", status, code)
	}
	oc.redis.Kill()
	page := string(oc.ops(t, 0, "GET", "/ops", "").Body)
	for _, want := range []string{`id="health"`, `id="attack-error"`, `id="stale"`, `Blocked numbers <span class="muted">(unknown;`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page with Redis down lacks %s", want)
		}
	}
	if strings.Contains(page, `Blocked numbers <span class="muted">(0;`) {
		t.Error("the page with Redis down says 0 numbers are blocked")
	}
}

// TestOpsPageSolvedRow: sends after a solved challenge and one the
// solved-challenge cap refused (unusual_volume, as the velocity rule's)
// show in GB's row, in GET /ops/abuse and on the page, as solved sends,
// the cap in force with what it holds ("2 of 2 this hour"), a refusal
// over the cap and the cap spent; the cap shown is the one the refusal
// names (its audit detail, "3 of 2 per 1h"); the status badge names the
// spent cap. Velocity floor 1 and solved cap 2, on a driven clock.
func TestOpsPageSolvedRow(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 1, 1, 10, 1, 0, 0, time.UTC)}
	p := challengePolicy(2)
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: &p, opts: []app.Option{app.WithClock(clock.Now)}})
	if r := oc.do(t, 0, "POST", "/otp/send", `{"phone":"+447400100001"}`); r.Status != http.StatusOK {
		t.Fatalf("first send: %d %s", r.Status, r.Body)
	}
	const refused = "+447400100004"
	for _, s := range []struct{ phone, code string }{{"+447400100002", ""}, {"+447400100003", ""}, {refused, "unusual_volume"}} {
		sol := solve(t, challengeOf(t, oc.do(t, 0, "POST", "/otp/send", `{"phone":"`+s.phone+`"}`)))
		if r := oc.do(t, 0, "POST", "/otp/send", sendWith(s.phone, sol)); problemCode(t, r) != s.code {
			t.Fatalf("solved send to %s: %d %s, want %q", s.phone, r.Status, r.Body, s.code)
		}
	}
	if err := oc.instances[0].app.FlushAbuse(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The cap the take enforced, as its refusal's audit event names it.
	usage := regexp.MustCompile(`\b\d+ of (\d+) per 1h\b`)
	var enforced string
	opsWait(t, "the solved cap's refusal in the audit trail", func() bool {
		for _, e := range oc.eventsIn(t, refused) {
			if m := usage.FindStringSubmatch(e.Detail); e.Outcome == "unusual_volume" && m != nil {
				enforced = m[1]
				return true
			}
		}
		return false
	})

	r := oc.ops(t, 0, "GET", "/ops/abuse", "")
	type solvedCap struct {
		Limit, Used int64
		Full, Cut   bool
	}
	var v struct {
		SolvedCapSpent []string `json:"solved_cap_spent"`
		LastHour       struct {
			Countries []struct {
				Country           string
				SolvedSends       int64      `json:"solved_sends"`
				SolvedCapRefusals int64      `json:"solved_cap_refusals"`
				SolvedCapSpent    bool       `json:"solved_cap_spent"`
				SolvedCap         *solvedCap `json:"solved_cap"`
				Carriers          []struct {
					SolvedSends       int64      `json:"solved_sends"`
					SolvedCapRefusals int64      `json:"solved_cap_refusals"`
					SolvedCapSpent    bool       `json:"solved_cap_spent"`
					SolvedCap         *solvedCap `json:"solved_cap"`
				}
			}
		} `json:"last_hour"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /ops/abuse: %d %s (%v)", r.Status, r.Body, err)
	}
	type counts struct {
		Solved, Capped int64
		Spent          bool
	}
	var gb, carriers counts
	var gbCap *solvedCap
	var carrierCaps []solvedCap // of the carriers solved sends went to
	for _, c := range v.LastHour.Countries {
		if c.Country == "GB" {
			gb, gbCap = counts{c.SolvedSends, c.SolvedCapRefusals, c.SolvedCapSpent}, c.SolvedCap
			for _, k := range c.Carriers {
				carriers.Solved, carriers.Capped = carriers.Solved+k.SolvedSends, carriers.Capped+k.SolvedCapRefusals
				carriers.Spent = carriers.Spent || k.SolvedCapSpent
				if k.SolvedSends > 0 && k.SolvedCap != nil {
					carrierCaps = append(carrierCaps, *k.SolvedCap)
				}
			}
		}
	}
	page := oc.ops(t, 0, "GET", "/ops", "").Body
	row := regexp.MustCompile(`(?s)<tr class="country-row" data-country="GB">.*?</tr>`).Find(page)
	cell := regexp.MustCompile(`(?s)<td data-label="Solved".*?</td>`).Find(row)
	text := func(b []byte) string {
		return strings.Join(strings.Fields(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(string(b), "")), " ")
	}
	badge := regexp.MustCompile(`(?s)<span class="badge [a-z]+" id="status-badge".*?</span>|<li class="[a-z]+" data-code="solved_cap">.*?</li>`).FindAll(page, -1)
	var badgeText []string
	for _, b := range badge {
		badgeText = append(badgeText, text(b))
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"the cap the refusal names", enforced, "2"},
		{"GB's row in GET /ops/abuse", gb, counts{2, 1, true}},
		{"GB's solved cap in GET /ops/abuse", gbCap, &solvedCap{Limit: 2, Used: 2, Full: true}},
		{"GB's carriers in GET /ops/abuse", carriers, counts{2, 1, true}},
		{"the solved carriers' caps (no history: the country's)", carrierCaps, []solvedCap{{Limit: 2, Used: 2, Full: true}}},
		{"solved_cap_spent", v.SolvedCapSpent, []string{"GB"}},
		{"GB's Solved cell on the page", text(cell), "2 · " + enforced + " of " + enforced + " this hour · 1 over the cap spent"},
		{"the status names the spent cap", strings.Contains(strings.Join(badgeText, " | "), "Solved-challenge cap spent in GB"), true},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	// The badge as an on-call person reads it, in a real Chromium: the
	// refusal fired GB's alert, which heads the badge; the spent cap is one
	// tap away under it.
	exe := browsertest.Chromium(t)
	ctx := browsertest.Headless(t, exe, 2*time.Minute)
	base := oc.instances[0].srv.URL
	signInChromium(t, ctx, base, `#status-badge`)
	checkBadge(t, ctx, base, badgeWant{code: "alert", class: "bad", text: "GB",
		more: "Solved-challenge cap spent in GB"})
}
