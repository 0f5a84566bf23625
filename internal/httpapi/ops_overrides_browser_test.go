package httpapi_test

import (
	"cmp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsOverridesInChromium drives the overrides section of the ops page
// in a real headless Chromium: a looser limit is refused with the field
// marked and what was typed kept; a tighter one and a pause are applied and
// listed with their time left; two are removed, each after a confirmation
// naming it: without JavaScript on a page of its own, with it in a dialog.
// A screenshot of the section is left as an artifact
// (docs/ops-overrides.png is one).
func TestOpsOverridesInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	pol := overridePolicies()
	pol.OTP.Budget.PerHour = 500
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: pol})
	base := oc.instances[0].srv.URL

	ctx := browsertest.Headless(t, exe, 2*time.Minute)

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	value := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Value(css(sel)))
		if err != nil {
			t.Fatalf("value of %s: %v", sel, err)
		}
		return v
	}
	form := `#override-form `
	fill := func(kind, subject, limit, lasts, reason string) chromedp.Action[chromedp.Void] {
		// chromedp cannot tell an input set to "" from a failed set: a
		// blank is a space, which the form trims away as a person's would.
		blank := func(v string) string { return cmp.Or(v, " ") }
		subject, limit = blank(subject), blank(limit)
		return chromedp.Steps(
			chromedp.SetValue(css(form+`select[name="kind"]`), kind),
			chromedp.SetValue(css(form+`input[name="subject"]`), subject),
			chromedp.SetValue(css(form+`input[name="limit"]`), limit),
			chromedp.SetValue(css(form+`input[name="expires_in"]`), lasts),
			chromedp.SetValue(css(form+`input[name="reason"]`), reason),
			chromedp.Click(css(form+`button[type="submit"]`)),
		)
	}

	signInChromium(t, ctx, base, `#overrides`)
	actor := text(`#actor`)

	// Looser than the file: refused, the limit field marked, nothing lost.
	err := chromedp.Do(ctx,
		fill("country_limit", "gb", "50", "2h", "pumping wave from a premium range"),
		chromedp.WaitVisible(css(`#overrides-problem`)),
	)
	if err != nil {
		t.Fatalf("looser override: %v", err)
	}
	if p := text(`#overrides-problem`); !strings.Contains(p, "otp.per_country.GB.limit is 4") {
		t.Errorf("refusal says %q, want the file's otp.per_country.GB.limit is 4", p)
	}
	attrs, err := chromedp.Run(ctx, chromedp.Attributes(css(form+`input[name="limit"]`)))
	if err != nil || attrs["aria-invalid"] != "true" {
		t.Errorf("limit field attributes %v (%v), want aria-invalid", attrs, err)
	}
	if k, s, l, r := value(form+`select[name="kind"]`), value(form+`input[name="subject"]`), value(form+`input[name="limit"]`),
		value(form+`input[name="reason"]`); k != "country_limit" || s != "gb" || l != "50" || r != "pumping wave from a premium range" {
		t.Errorf("form after the refusal: %q %q %q %q, want what was typed", k, s, l, r)
	}

	// Tighter: applied; and a pause.
	err = chromedp.Do(ctx,
		// Each waits for the row it adds: the page it submitted from has a
		// flash too.
		fill("country_limit", "GB", "2", "2h", "pumping wave from a premium range"),
		chromedp.WaitVisible(css(`tr.override-row[data-id="1"]`)),
		fill("country_pause", "NG", "", "24h", "premium-rate numbers, provider alert"),
		chromedp.WaitVisible(css(`tr.override-row[data-id="2"]`)),
		fill("budget_per_hour", "", "120", "6h", "spend cap while the wave lasts"),
		chromedp.WaitVisible(css(`tr.override-row[data-id="3"]`)),
	)
	if err != nil {
		t.Fatalf("apply overrides: %v", err)
	}
	rows := text(`#overrides table`)
	for _, want := range []string{"Tighten a country's limit", "GB", "Pause a country", "NG", "paused", "Lower the hourly budget", "120", "500", actor} {
		if !strings.Contains(rows, want) {
			t.Errorf("overrides table lacks %q:\n%s", want, rows)
		}
	}
	// The 2 h override's time left, shown to the minute and rounded to the
	// second: 2h 00m while less than half a second has passed, 1h 59m after.
	if !strings.Contains(rows, "1h 59m") && !strings.Contains(rows, "2h 00m") {
		t.Errorf("overrides table lacks the 2 h override's time left (1h 59m or 2h 00m):\n%s", rows)
	}
	if status, code := oc.send(t, 0, "+2348031234567"); code != string(problem.CodeCountryPaused) {
		t.Errorf("send to NG after the pause from the page: %d %s, want country_paused", status, code)
	}
	section, err := chromedp.Run(ctx, chromedp.Screenshot(css(`#overrides`)))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}

	// Remove the pause without JavaScript: a page asks first, naming it.
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatalf("disable JavaScript: %v", err)
	}
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/ops?refresh=0"),
		chromedp.WaitVisible(css(`tr.override-row[data-id="2"]`)),
		chromedp.Click(css(`tr.override-row[data-id="2"] button.danger`)),
		chromedp.WaitVisible(css(`#confirm-message`)),
	)
	if err != nil {
		t.Fatalf("remove the pause: %v", err)
	}
	if q := text(`#confirm-message`); !strings.Contains(q, "Remove the override pausing NG?") {
		t.Errorf("the confirmation page asks %q, want it to name the pause of NG", q)
	}
	if _, code := oc.send(t, 0, "+2348031234569"); code != string(problem.CodeCountryPaused) {
		t.Errorf("send to NG while the removal waits for its confirmation: %s, want country_paused", code)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(css(`#confirm-yes`)),
		chromedp.WaitVisible(css(`#overrides-flash`)),
	)
	if err != nil {
		t.Fatalf("confirm the removal: %v", err)
	}
	if flash, rows := text(`#overrides-flash`), text(`#overrides table`); !strings.Contains(flash, "removed") || strings.Contains(rows, "Pause a country") {
		t.Errorf("after removing the pause: flash %q, table:\n%s", flash, rows)
	}
	if status, code := oc.send(t, 0, "+2348031234568"); status != 200 {
		t.Errorf("send to NG after removing the pause: %d %s, want 200", status, code)
	}

	// With JavaScript the page's script asks in a dialog, naming the
	// override; dismissed, nothing is removed; accepted, it is.
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatalf("enable JavaScript: %v", err)
	}
	dialogs := make(chan string, 4)
	var accept atomic.Bool
	go func() {
		for ev, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dialogs <- ev.Message
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept.Load()}); err != nil {
				return
			}
		}
	}()
	budget := css(`tr.override-row[data-id="3"]`)
	for _, yes := range []bool{false, true} {
		accept.Store(yes)
		err := chromedp.Do(ctx,
			chromedp.Navigate(base+"/ops?refresh=0"),
			chromedp.WaitVisible(budget),
			chromedp.Click(css(`tr.override-row[data-id="3"] button.danger`)),
		)
		if err != nil {
			t.Fatalf("remove the budget override (accept %v): %v", yes, err)
		}
		select {
		case q := <-dialogs:
			if !strings.Contains(q, "Remove the override lowering the hourly budget to 120?") {
				t.Errorf("the dialog asks %q, want it to name the hourly budget of 120", q)
			}
		case <-ctx.Done():
			t.Fatal("no confirmation dialog")
		}
		if yes {
			if err := chromedp.Do(ctx, chromedp.WaitNotPresent(budget)); err != nil {
				t.Fatalf("the budget override after the confirmation: %v", err)
			}
		}
	}
	list := oc.ops(t, 0, "GET", "/ops/overrides", "").json(t)["overrides"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["kind"] != "country_limit" {
		t.Errorf("overrides left: %v, want GB's limit alone (the dismissed dialog removed nothing)", list)
	}

	browsertest.Picture(t, "ops-overrides.png", section)
}

// TestOpsOverridesOnAPhone: at 390 px, with one override in force, the
// overrides table stacks like every other table on the page, and its
// Remove button lies inside the viewport with nothing scrolling sideways.
func TestOpsOverridesOnAPhone(t *testing.T) {
	exe := browsertest.Chromium(t)
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: overridePolicies()})
	base := oc.instances[0].srv.URL
	if r := oc.ops(t, 0, "POST", "/ops/overrides",
		`{"kind":"country_limit","subject":"GB","limit":2,"reason":"pumping wave from a premium range, ticket 4711","expires_in":7200}`); r.Status != 201 {
		t.Fatalf("add override: %d %s", r.Status, r.Body)
	}

	ctx := browsertest.Headless(t, exe, time.Minute)
	signInChromium(t, ctx, base, `#overrides`)
	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(base+"/ops?refresh=0"),
		chromedp.WaitVisible(chromedp.CSS(`tr.override-row[data-id="1"]`)),
	)
	if err != nil {
		t.Fatalf("at 390 px: %v", err)
	}
	type measure struct {
		Client, Scroll int
		Left, Right    float64
		Display        string
	}
	js := `(() => {
	  const b = document.querySelector('tr.override-row button.danger').getBoundingClientRect();
	  return {client: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth,
	    left: b.left, right: b.right,
	    display: getComputedStyle(document.querySelector('tr.override-row td')).display};
	})()`
	m, err := chromedp.Run(ctx, chromedp.Evaluate[measure](js))
	if err != nil {
		t.Fatalf("measure: %v", err)
	}
	if m.Display == "table-cell" {
		t.Errorf("at 390 px the overrides table's cells are %q, want them stacked like the other tables", m.Display)
	}
	if m.Left < 0 || m.Right > float64(m.Client) {
		t.Errorf("at 390 px the Remove button spans %.0f-%.0f px, outside the %d px viewport", m.Left, m.Right, m.Client)
	}
	if m.Scroll > m.Client {
		t.Errorf("at 390 px the page is %d px wide in a %d px viewport (scrolls sideways)", m.Scroll, m.Client)
	}
}
