package httpapi_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// The numbers of the search tests, one per state.
const (
	searchBlocked = "+447400900001" // locked out by wrong guesses (block index)
	searchDenied  = "+447400900002"
	searchTrusted = "+447400900003"
	searchLimited = "+447400900004" // sent to, then refused by its cooldown (which gives its count back)
	searchUnknown = "+447400900005"
	searchGuessed = "+447400900006" // sent to, then two wrong guesses at its code
)

// seedSearch puts one number in each state the search tells apart.
func seedSearch(t *testing.T, oc *opsCluster) {
	t.Helper()
	ctx := context.Background()
	n := oc.nodes[0]
	if err := n.redis.Blocks.NoteBlock(ctx, guard.Block{Phone: searchBlocked, Country: "GB", Reason: problem.CodeTooManyAttempts,
		Count: 5, Until: time.Now().Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.desk.AddDeny(ctx, guard.DenyEntry{Pattern: searchDenied, Reason: "fraud, ticket 12"}, "ops:test"); err != nil {
		t.Fatal(err)
	}
	if r := oc.ops(t, 0, "POST", "/ops/trusted-numbers", `{"numbers":["`+searchTrusted+`"]}`); r.Status != http.StatusOK {
		t.Fatalf("import: %d %s", r.Status, r.Body)
	}
	if status, _ := oc.send(t, 0, searchLimited); status != http.StatusOK {
		t.Fatalf("send: %d", status)
	}
	if _, code := oc.send(t, 0, searchLimited); code != string(problem.CodeCooldown) {
		t.Fatalf("second send: %q, want cooldown", code)
	}
	if status, _ := oc.send(t, 0, searchGuessed); status != http.StatusOK {
		t.Fatalf("send: %d", status)
	}
	wrong := map[bool]string{true: "111111", false: "000000"}[oc.out.LastCode(t, searchGuessed) == "000000"]
	for range 2 {
		if r := oc.do(t, 0, "POST", "/otp/verify", `{"phone":"`+searchGuessed+`","code":"`+wrong+`"}`); problemCode(t, r) != "wrong_code" {
			t.Fatalf("wrong guess: %d %s", r.Status, r.Body)
		}
	}
	opsWait(t, "the sends and guesses in the audit trail", func() bool {
		return len(oc.eventsIn(t, searchLimited)) == 2 && len(oc.eventsIn(t, searchGuessed)) == 3
	})
}

// TestOpsNumberSearchInChromium asks the page's search, in a real Chromium
// on a phone's viewport, why each of five numbers got no code, spelled as
// people type them: a blocked, a deny-listed, a trusted, a rate-limited
// and an unknown one. Each answer says what refuses it and offers the
// actions that apply; Trust on the unknown one marks it. Every look-up is
// audited with the number masked.
func TestOpsNumberSearchInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	seedSearch(t, oc)
	base := oc.instances[0].srv.URL
	ctx := browsertest.Headless(t, exe, 3*time.Minute)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	signInChromium(t, ctx, base, `#search input[name="q"]`)

	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+sel+`').length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tests := []struct {
		name, typed, phone string
		wantRefusing       []string // the codes of #number-refusing; none: #number-clear
		want               map[string]string
		wantActions        []string // the action forms offered
	}{
		{name: "blocked", typed: "+44 7400 900001", phone: searchBlocked, wantRefusing: []string{"too_many_attempts"},
			want: map[string]string{"#number-blocks": "too_many_attempts"}, wantActions: []string{"unblock", "trust", "deny"}},
		{name: "deny-listed", typed: "+44 (0)7400-900002", phone: searchDenied, wantRefusing: []string{"denied"},
			want: map[string]string{"#number-denied": "fraud, ticket 12"}, wantActions: []string{"undeny"}},
		{name: "trusted", typed: "+44-7400-900003", phone: searchTrusted,
			want: map[string]string{"#number-trusted": "yes"}, wantActions: []string{"deny"}},
		{name: "rate-limited", typed: "+447400900004", phone: searchLimited, wantRefusing: []string{"cooldown"},
			want:        map[string]string{"#number-last": "cooldown", "#number-sends": "1 of 3", "#number-cooldown": "left"},
			wantActions: []string{"unblock", "trust", "deny"}},
		{name: "unknown", typed: "+44 7400 900 005", phone: searchUnknown,
			want:        map[string]string{"#number-last": "none", "#number-blocks": "none", "#number-trusted": "no", "#number-code": "none live"},
			wantActions: []string{"trust", "deny"}},
		{name: "two wrong guesses", typed: "+44-7400-900-006", phone: searchGuessed, wantRefusing: []string{"cooldown"},
			want:        map[string]string{"#number-code": "2 of 5 wrong guesses, expires in"},
			wantActions: []string{"unblock", "trust", "deny"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := chromedp.Do(ctx,
				chromedp.Navigate(base+"/ops"),
				chromedp.WaitVisible(chromedp.CSS(`#search input[name="q"]`)),
				chromedp.SendKeys(chromedp.CSS(`#search input[name="q"]`), tt.typed),
				chromedp.Click(chromedp.CSS(`#search button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS(`#number-answer, #search-problem`)),
			)
			if err != nil {
				t.Fatalf("search %q: %v", tt.typed, err)
			}
			if count(`#search-problem`) > 0 {
				t.Fatalf("search %q: %s", tt.typed, text(`#search-problem`))
			}
			if got := text(`#number-answer h3 .num`); got != tt.phone {
				t.Errorf("answer for %q: got %s, want %s", tt.typed, got, tt.phone)
			}
			for _, code := range tt.wantRefusing {
				if count(`#number-refusing li[data-code="`+code+`"]`) != 1 {
					t.Errorf("refusing: %q, want %s", text(`#number-answer`), code)
				}
			}
			if len(tt.wantRefusing) == 0 && count(`#number-clear`) != 1 {
				t.Errorf("answer %q: want nothing refusing", text(`#number-answer`))
			}
			for sel, want := range tt.want {
				if got := text(sel); !strings.Contains(got, want) {
					t.Errorf("%s: got %q, want %q in it", sel, got, want)
				}
			}
			for _, a := range []string{"unblock", "trust", "clear-risk", "deny", "undeny"} {
				want := 0
				for _, w := range tt.wantActions {
					if w == a {
						want = 1
					}
				}
				if got := count(`#number-actions form.` + a); got != want {
					t.Errorf("action %s: %d forms, want %d", a, got, want)
				}
			}
		})
	}

	// The answer fits a phone: nothing scrolls sideways (a picture of it
	// is left with the test's artifacts).
	err := chromedp.Do(ctx, chromedp.Navigate(base+"/ops?q="+pathPhone(searchLimited)), chromedp.WaitVisible(chromedp.CSS(`#number-answer`)))
	if err != nil {
		t.Fatal(err)
	}
	type widths struct{ Client, Scroll int }
	w, err := chromedp.Run(ctx, chromedp.Evaluate[widths](`({client: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth})`))
	if err != nil || w.Scroll > w.Client {
		t.Errorf("at 390 px the answer's page is %d px wide in %d (%v)", w.Scroll, w.Client, err)
	}
	if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
		path := filepath.Join(browsertest.ArtifactDir(t), "ops-search-phone.png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	// An action from the answer comes back to it: trust the unknown number.
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/ops?q="+pathPhone(searchUnknown)),
		chromedp.WaitVisible(chromedp.CSS(`#number-actions form.trust button`)),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(`#number-actions form.trust button`)),
		chromedp.WaitVisible(chromedp.CSS(`#flash`)),
		chromedp.WaitVisible(chromedp.CSS(`#number-answer`)),
	)
	if err != nil {
		t.Fatalf("trust from the answer: %v", err)
	}
	if got := text(`#number-trusted`); !strings.Contains(got, "yes") {
		t.Errorf("after Trust: %q, want yes", got)
	}

	// Every look-up is audited, the number masked, never in clear.
	opsWait(t, "the look-ups in the audit trail", func() bool {
		events, err := oc.nodes[0].desk.Events(context.Background(), ops.EventFilter{Action: ops.ActionLookup, Limit: 100})
		if err != nil || len(events) < len(tests)+2 {
			return false
		}
		for _, e := range events {
			if e.Phone != "" || strings.Contains(e.Detail, "900") || !strings.HasPrefix(e.Actor, "ops:") || e.RequestID == "" {
				t.Fatalf("look-up event %+v: want the number masked, the actor and the request", e)
			}
		}
		return true
	})
}
