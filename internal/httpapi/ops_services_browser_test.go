package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsServicesInChromium: two Verify services and the default service
// send and verify; the page, in a real Chromium on a phone's viewport,
// lists each with its day's sends and verified checks, and a service's
// Events link opens the event list filtered to that service's events,
// its SID in the filter's service field. The attack view's By service
// table shows the same sends and verified checks.
func TestOpsServicesInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	oc := servicesCluster(t, sqlstore.EngineSQLite, deskShop, deskBank)
	shopPhones := []string{"+447400900201", "+447400900202", "+447400900203"}
	for i, phone := range shopPhones {
		serviceSend(t, oc, deskShop, phone, i < 2) // three sends, two verified
	}
	serviceSend(t, oc, deskBank, "+447400900211", true)
	if status, _ := oc.send(t, 0, "+447400900221"); status != http.StatusOK { // the default service's
		t.Fatalf("send: %d", status)
	}
	waitServiceCounts(t, oc, map[string]ops.ServiceCount{
		"":           {Service: "", Sends: 1},
		deskShop.sid: {Service: deskShop.sid, Sends: 3, Verified: 2},
		deskBank.sid: {Service: deskBank.sid, Sends: 1, Verified: 1},
	})

	if err := oc.instances[0].app.FlushAbuse(context.Background()); err != nil { // the attack view's counts
		t.Fatal(err)
	}

	base := oc.instances[0].srv.URL
	ctx := browsertest.Headless(t, exe, 3*time.Minute)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	signInChromium(t, ctx, base, `#services`)

	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
			`(document.querySelector(%q) || {textContent: "(none)"}).textContent.trim()`, sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	for _, tc := range []struct {
		name, sid      string
		sent, verified string
	}{
		{"default", "", "1", "0"},
		{"Shop", deskShop.sid, "3", "2"},
		{"Bank", deskBank.sid, "1", "1"},
	} {
		row := fmt.Sprintf(`#services tr.service-row[data-sid=%q]`, tc.sid)
		if got := text(row + " .service-sends"); got != tc.sent {
			t.Errorf("%s: sent %q, want %s", tc.name, got, tc.sent)
		}
		if got := text(row + " .service-verified"); got != tc.verified {
			t.Errorf("%s: verified %q, want %s", tc.name, got, tc.verified)
		}
		// The attack view's By service table, last hour: the same figures,
		// the country under the service.
		label := tc.sid
		if label == "" {
			label = "default"
		}
		abuse := fmt.Sprintf(`#services-hour tr.service-abuse-row[data-service=%q]`, label)
		if got := text(abuse + ` td[data-label="Sent"]`); got != tc.sent {
			t.Errorf("%s: the attack view's sent %q, want %s", tc.name, got, tc.sent)
		}
		if got := text(abuse + ` td[data-label="Verified"]`); got != tc.verified {
			t.Errorf("%s: the attack view's verified %q, want %s", tc.name, got, tc.verified)
		}
		if got := text(abuse + ` + tr.service-country-row td[data-label="Country"]`); got != "GB" {
			t.Errorf("%s: the attack view's country %q, want GB", tc.name, got)
		}
	}

	err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#services tr.service-row[data-sid=%q] a.service-events`, deskShop.sid))),
		chromedp.WaitVisible(chromedp.CSS(`#events .event-row`)),
	)
	if err != nil {
		t.Fatalf("the Shop's Events link: %v", err)
	}
	field, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(`#event-filter input[name="service"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if field != deskShop.sid {
		t.Errorf("the event filter's service: %q, want %s", field, deskShop.sid)
	}
	numbers, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#events .event-row td[data-label="Number"]')].map(td => td.textContent.trim())`))
	if err != nil {
		t.Fatal(err)
	}
	// The Shop's three sends and two checks, and nothing of the others.
	if len(numbers) != 5 {
		t.Errorf("the Shop's events: %d rows %v, want 5 (3 sends, 2 checks)", len(numbers), numbers)
	}
	for _, n := range numbers {
		if !slices.Contains(shopPhones, n) {
			t.Errorf("the Shop's events list %s, another service's number", n)
		}
	}
}
