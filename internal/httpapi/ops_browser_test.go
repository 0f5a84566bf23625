package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// seedAttack gives the page a realistic data set: a spent hourly budget,
// two countries at their limits, hundreds of blocked numbers, conversion
// alerts with their automatic blocks, and a few deny-list entries.
func seedAttack(t *testing.T, oc *opsCluster) {
	t.Helper()
	ctx := context.Background()
	for i := range 10 { // legitimate, verified
		phone := fmt.Sprintf("+447400%06d", 200+i)
		oc.send(t, i, phone)
		oc.do(t, i, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`)
	}
	for i := range 24 {
		oc.send(t, i, fmt.Sprintf("+234803%07d", 2000+i))
	}
	for i := range 20 {
		oc.send(t, i, fmt.Sprintf("+92300%07d", 2000+i))
	}
	for i := range 30 { // spends what is left of the budget, then refused
		oc.send(t, i, fmt.Sprintf("+2782%07d", 2000+i))
	}
	n := oc.nodes[0]
	now := time.Now()
	for i := range 300 {
		reason := []problem.Code{problem.CodeCooldown, problem.CodePhoneRateLimited, problem.CodeTooManyAttempts}[i%3]
		if err := n.redis.Blocks.NoteBlock(ctx, guard.Block{Phone: fmt.Sprintf("+91981%07d", i), Country: "IN", Reason: reason,
			Count: int64(3 + i%4), Until: now.Add(time.Duration(5+i%50) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	var alerts []ops.AbuseAlert
	for _, p := range []string{"+2348031", "+23480312", "+234803123"} {
		until := now.Add(time.Hour)
		if _, err := n.desk.AddDeny(ctx, guard.DenyEntry{Pattern: p, ExpiresAt: &until,
			Reason: "conversion watch: 0 verified against 24 codes sent in the last hour and older than 2m0s (0.0%), below min_rate 20.0%"}, guard.ConversionActor); err != nil {
			t.Fatal(err)
		}
		alerts = append(alerts, ops.AbuseAlert{Rule: "conversion", Scope: "prefix", Subject: p, Country: "NG", Outcome: "blocked", At: now, Until: until,
			Detail: "prefix=" + p + " conversion watch: 0 verified against 24 codes sent in the last hour and older than 2m0s (0.0%)"})
	}
	alerts = append(alerts, ops.AbuseAlert{Rule: "velocity", Scope: "country", Subject: "PK", Country: "PK", Outcome: "unusual_volume", At: now,
		Until: now.Truncate(time.Hour).Add(time.Hour), Detail: "country=PK unusual volume: 50 sends this hour against the limit 50 (baseline 0, floor 50, factor 3)"})
	if err := n.redis.AbuseCounters.AddAbuse(ctx, nil, alerts, now); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"+88213", "+4490987"} {
		if _, err := n.desk.AddDeny(ctx, guard.DenyEntry{Pattern: p, Reason: "premium range, ticket 4711"}, "ops:35565361"); err != nil {
			t.Fatal(err)
		}
	}
	for _, in := range oc.instances {
		if err := in.app.FlushAbuse(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpsPageInChromium drives the ops page in a real headless Chromium
// with a realistic attack on it, at 1280 and at 390 px: sign in, see the
// attack view (the spent budget unmistakable), check that every action
// control lies inside the viewport and that nothing scrolls sideways,
// unblock a number (the confirmation names it), add a prefix to the
// deny-list, and leave screenshots (docs/ops-page.png and
// docs/ops-page-phone.png come from here).
func TestOpsPageInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	pol := attackPolicies()
	pol.OTP.Budget.PerHour = 50
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: &pol})
	const phone = "+14155550100"
	if status, _ := oc.send(t, 0, phone); status != 200 {
		t.Fatalf("send: %d", status)
	}
	if _, code := oc.send(t, 0, phone); code != "cooldown" {
		t.Fatalf("second send: %q, want cooldown", code)
	}
	seedAttack(t, oc)
	opsWait(t, "the deny-list to load", func() bool { return len(oc.nodes[0].deny.Entries()) == 5 })
	base := oc.instances[0].srv.URL

	ctx := browsertest.Headless(t, exe, 3*time.Minute)
	// Confirmation dialogs: remember what they say, and accept.
	var dialogs []string
	var dmu sync.Mutex
	listen := func() {
		for ev, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dmu.Lock()
			dialogs = append(dialogs, ev.Message)
			dmu.Unlock()
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	// inView checks that every action control lies inside the viewport's
	// width and that the page does not scroll sideways.
	inView := func(width int) {
		t.Helper()
		type control struct {
			Name        string
			Left, Right float64
		}
		type measure struct {
			Client, Scroll int
			Controls       []control
		}
		js := `(() => {
		  const w = document.documentElement.clientWidth;
		  const els = document.querySelectorAll('td.actions button, #deny-add button, #deny-add input, #event-filter button, #blocked form.row button, header button');
		  return {client: w, scroll: document.documentElement.scrollWidth,
		    controls: Array.from(els).map(b => { const r = b.getBoundingClientRect(); return {name: b.textContent.trim() || b.name, left: r.left, right: r.right}; })};
		})()`
		res, err := chromedp.Run(ctx, chromedp.Evaluate[measure](js))
		if err != nil {
			t.Fatalf("measure: %v", err)
		}
		if res.Client > width || res.Client < width-20 || res.Scroll > res.Client { // less a scroll bar
			t.Errorf("at %d px: viewport %d px, page %d px wide (scrolls sideways)", width, res.Client, res.Scroll)
		}
		if len(res.Controls) < 25 {
			t.Errorf("at %d px: %d action controls measured, want the page's (at least 25)", width, len(res.Controls))
		}
		for _, c := range res.Controls {
			if c.Left < 0 || c.Right > float64(res.Client) {
				t.Errorf("at %d px: %q spans %.0f-%.0f px, outside the viewport", width, c.Name, c.Left, c.Right)
			}
		}
	}

	// Signed out, the page sends us to the sign-in form.
	signInChromium(t, ctx, base, `#actor`)
	actor := text(`#actor`)
	if !strings.HasPrefix(actor, "ops:") || strings.Contains(actor, opsKey) {
		t.Errorf("signed in as %q, want ops:<key id>", actor)
	}
	go listen()
	// The attack view: the spent budget says so.
	if b := text(`.budget[data-window="Spend budget, hour"]`); !strings.Contains(b, "50 / 50") || !strings.Contains(b, "EXHAUSTED") {
		t.Errorf("hourly budget card: %q, want 50 / 50 and EXHAUSTED", b)
	}
	if a := text(`#alerts`); !strings.Contains(a, "+234803123") || !strings.Contains(a, "unusual_volume") {
		t.Errorf("alerts: %q", a)
	}
	if c := text(`#countries-hour tr[data-country="NG"]`); !strings.Contains(c, "per_country") {
		t.Errorf("NG row: %q, want its per_country limit", c)
	}
	// Deny-list entries are listed once: in the deny-list, not as blocks.
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr.blocked-row[data-phone="+88213"]').length`)); err != nil || n != 0 {
		t.Errorf("a deny-list entry is listed among the blocked numbers too (%d rows, %v)", n, err)
	}

	// The blocked number, its reason and time left.
	row := `tr.blocked-row[data-phone="` + phone + `"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ops?phone=%2B1415"), chromedp.WaitVisible(css(row))); err != nil {
		t.Fatalf("blocked number not shown: %v", err)
	}
	if reason, left := text(row+` .reason`), text(row+` td:nth-child(6)`); reason != "cooldown" || !strings.HasSuffix(left, "s") {
		t.Errorf("blocked row: reason %q, time left %q", reason, left)
	}
	// Unblock it: the confirmation names the number.
	err := chromedp.Do(ctx,
		chromedp.Click(css(row+` form.unblock button`)),
		chromedp.WaitVisible(css(`#flash`)),
		chromedp.WaitNotPresent(css(row)),
	)
	if err != nil {
		t.Fatalf("unblock: %v", err)
	}
	dmu.Lock()
	if len(dialogs) != 1 || !strings.Contains(dialogs[0], phone) {
		t.Errorf("confirmations: %q, want one naming %s", dialogs, phone)
	}
	dmu.Unlock()
	if flash := text(`#flash`); !strings.Contains(flash, "Unblocked") {
		t.Errorf("after unblock the page says %q", flash)
	}
	if _, code := oc.send(t, 0, phone); code == "cooldown" { // the spent budget refuses it now
		t.Errorf("send after unblocking in the browser: still %s", code)
	}

	// A bad expiry is named, and the form keeps what was typed.
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/ops"),
		chromedp.WaitVisible(css(`#deny-add`)),
		chromedp.SendKeys(css(`#deny-add input[name="pattern"]`), "+88216"),
		chromedp.SendKeys(css(`#deny-add input[name="reason"]`), "fraud wave"),
		chromedp.SendKeys(css(`#deny-add input[name="expires_in"]`), "tomorrow"),
		chromedp.Click(css(`#deny-add button[type="submit"]`)),
		chromedp.WaitVisible(css(`#error-expires_in`)),
	)
	if err != nil {
		t.Fatalf("bad expiry: %v", err)
	}
	if kept, err := chromedp.Run(ctx, chromedp.Value(css(`#deny-add input[name="reason"]`))); err != nil || kept != "fraud wave" {
		t.Errorf("after a refused field the reason is %q (%v), want what was typed", kept, err)
	}
	// Fixed, it is added.
	err = chromedp.Do(ctx,
		chromedp.SetValue(css(`#deny-add input[name="expires_in"]`), "24h"),
		chromedp.Click(css(`#deny-add button[type="submit"]`)),
		chromedp.WaitVisible(css(`tr.deny-row[data-pattern="+88216"]`)),
		chromedp.WaitVisible(css(`#activity svg rect.sends`)),
	)
	if err != nil {
		t.Fatalf("add a prefix to the deny-list: %v", err)
	}
	if flash, author := text(`#flash`), text(`tr.deny-row[data-pattern="+88216"] td:nth-child(4)`); !strings.Contains(flash, "deny-list") || author != actor {
		t.Errorf("after adding: flash %q, author %q (want %q)", flash, author, actor)
	}
	if _, ok := oc.nodes[0].deny.Denied("+882160000000", time.Now()); !ok {
		t.Error("the prefix added in the browser is not enforced")
	}
	events := text(`#events`)
	for _, want := range []string{"ops.unblock", "ops.deny.add", "ops.login", "otp.send"} {
		if !strings.Contains(events, want) {
			t.Errorf("recent events lack %s", want)
		}
	}

	// Both widths, the whole page: every action inside the viewport.
	shots := map[string][]byte{}
	for _, w := range []struct {
		width, height int64
		name          string
	}{{1280, 1000, "ops-page.png"}, {390, 844, "ops-page-phone.png"}} {
		err := chromedp.Do(ctx,
			chromedp.EmulateViewport(w.width, w.height),
			chromedp.Navigate(base+"/ops?refresh=0"),
			chromedp.WaitVisible(css(`#attack`)),
		)
		if err != nil {
			t.Fatalf("at %d px: %v", w.width, err)
		}
		inView(int(w.width))
		// The picture: the top of the page, as tall as a few screens.
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(w.width, 2200)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		shots[w.name] = png
	}

	for name, png := range shots {
		browsertest.Picture(t, name, png)
	}
}

// signInChromium opens the ops page signed out, signs in with the ops key
// on the form it is sent to, and waits for the element sel of the page.
func signInChromium(t *testing.T, ctx context.Context, base, sel string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ops"),
		chromedp.WaitVisible(chromedp.CSS(`#login input[name="key"]`)),
		chromedp.SendKeys(chromedp.CSS(`#login input[name="key"]`), opsKey),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(sel)),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
}
