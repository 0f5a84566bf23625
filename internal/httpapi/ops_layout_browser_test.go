package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// overflow is an element wider than its card, as the page measures it.
type overflow struct {
	Card, El     string
	Left, Right  float64
	CardL, CardR float64
	Scroll       int
	Client       int
}

// measureCards finds, in the page as laid out now, every element that
// leaves its card: a card (a section, or a .card inside one) whose content
// scrolls sideways (scrollWidth past clientWidth), or a descendant whose
// box reaches past the card's left or right edge. Elements not laid out
// (a folded <details>'s content, hidden inputs) have no box and are
// skipped. It also returns how many cards and elements it measured.
const measureCards = `(() => {
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).join('.') : '');
  const out = [], cards = document.querySelectorAll('main section, main .card, nav.sections, header');
  let n = 0;
  for (const c of cards) {
    const cr = c.getBoundingClientRect();
    if (c.scrollWidth > c.clientWidth + 1) {
      out.push({card: name(c), el: name(c), left: cr.left, right: cr.right, cardL: cr.left, cardR: cr.right, scroll: c.scrollWidth, client: c.clientWidth});
    }
    for (const el of c.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      n++;
      if (r.left < cr.left - 0.5 || r.right > cr.right + 0.5) {
        out.push({card: name(c), el: name(el) + ' "' + (el.textContent || '').trim().slice(0, 40) + '"', left: r.left, right: r.right, cardL: cr.left, cardR: cr.right});
      }
    }
  }
  return {cards: cards.length, elements: n, over: out};
})()`

// TestOpsPageFitsAHand drives the ops page in Chromium during a scripted
// attack, at 1280 px and on a 390 x 844 phone: no element is wider than
// its card; the top of the page (the health line and the budgets, then
// the alerts) is on the first phone screen; each link of the section bar
// brings its section to the top, under the bar, which stays on screen;
// the events come 25 at a time with their request IDs shortened; and an
// alert's one-tap "Pause" puts an override in force that the country's
// row then shows. It takes docs/ops-page-first-screen.png
// (browsertest.Picture).
func TestOpsPageFitsAHand(t *testing.T) {
	exe := browsertest.Chromium(t)
	pol := attackPolicies()
	pol.OTP.Budget.PerHour = 50
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: &pol})
	seedAttack(t, oc)
	// Events with what made rows tall: a long request ID and a long detail.
	var long []guard.Event
	for i := range 40 {
		long = append(long, guard.Event{At: time.Now().Add(-time.Duration(40-i) * time.Second), Action: guard.ActionOTPSend, Outcome: "phone_rate_limited",
			Phone: fmt.Sprintf("+447400%06d", 900+i), Country: "GB", IP: "2001:db8:1234:5678:9abc:def0:1234:5678",
			RequestID: fmt.Sprintf("01JF3QZK8Y6N4XW2T7V5R9P0M%03d-a-request-id-an-app-made-long", i),
			Detail:    "per_number=5/5 per 1h0m0s; per_ip=20/20 per 1h0m0s; prefix +44740090 at 12/12; a detail that used to wrap letter by letter"})
	}
	if err := oc.nodes[0].db.WriteEvents(t.Context(), long); err != nil {
		t.Fatal(err)
	}
	opsWait(t, "the deny-list to load", func() bool { return len(oc.nodes[0].deny.Entries()) == 5 })
	base := oc.instances[0].srv.URL

	ctx := browsertest.Headless(t, exe, 6*time.Minute)
	signInChromium(t, ctx, base, `#actor`)
	// Confirmations: accepted. Listened to once the browser runs (its
	// first action, the sign-in, starts it).
	go func() {
		for _, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}()

	for _, w := range []struct{ width, height int64 }{{1280, 1000}, {390, 844}} {
		t.Run(fmt.Sprint(w.width), func(t *testing.T) {
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(w.width, w.height), chromedp.Navigate(base+"/ops?refresh=0"),
				chromedp.WaitVisible(chromedp.CSS(`#alerts .alert-row`))); err != nil {
				t.Fatal(err)
			}
			m := evalJS[struct {
				Cards, Elements int
				Over            []overflow
			}](t, ctx, measureCards)
			if m.Cards < 10 || m.Elements < 500 {
				t.Errorf("measured %d cards, %d elements: want the whole page's (at least 10 and 500)", m.Cards, m.Elements)
			}
			perCard := map[string]int{}
			for _, o := range m.Over {
				if perCard[o.Card]++; perCard[o.Card] > 3 { // the first few say enough
					continue
				}
				if o.Scroll > 0 {
					t.Errorf("at %d px: %s scrolls sideways: %d px of content in %d", w.width, o.Card, o.Scroll, o.Client)
					continue
				}
				t.Errorf("at %d px: %s spans %.0f-%.0f px, outside its card %s (%.0f-%.0f)", w.width, o.El, o.Left, o.Right, o.Card, o.CardL, o.CardR)
			}
			for card, n := range perCard {
				if n > 3 {
					t.Errorf("at %d px: %d elements in all leave %s", w.width, n, card)
				}
			}

			// The first screen holds the health line, the budgets and the
			// alerts' heading and first alert.
			top := evalJS[map[string]float64](t, ctx, `(() => { const b = s => { const e = document.querySelector(s); return e ? e.getBoundingClientRect().bottom : -1; };
			  const t = s => { const e = document.querySelector(s); return e ? e.getBoundingClientRect().top : -1; };
			  return {health: b('#health'), budget: b('#budget'), alerts: b('#alerts h2'), first: t('#alerts .alert-row'), status: b('#status'), search: b('#search')}; })()`)
			for _, part := range []string{"health", "budget", "alerts", "first"} {
				if top[part] < 0 || top[part] > float64(w.height) {
					t.Errorf("at %dx%d: the %s ends at %.0f px, below the first screen", w.width, w.height, part, top[part])
				}
			}
			for _, part := range []string{"status", "search"} { // the status badge's and the search's, where present
				if top[part] > float64(w.height) {
					t.Errorf("at %dx%d: the %s ends at %.0f px, below the first screen", w.width, w.height, part, top[part])
				}
			}
			if w.width == 390 {
				if err := chromedp.Do(ctx, chromedp.EmulateViewport(w.width, w.height)); err != nil {
					t.Fatal(err)
				}
				shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatal(err)
				}
				browsertest.Picture(t, "ops-page-first-screen.png", shot)
			}

			// Each link of the bar brings its section under the bar; the bar
			// stays at the top of the screen.
			links := evalJS[[]string](t, ctx, `Array.from(document.querySelectorAll('nav.sections a')).map(a => a.getAttribute('href'))`)
			want := []string{"#attack", "#alerts", "#countries", "#overrides", "#services", "#blocked", "#denylist", "#events"}
			if strings.Join(links, " ") != strings.Join(want, " ") {
				t.Errorf("the section bar links %v, want %v", links, want)
			}
			for _, href := range links {
				if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`nav.sections a[href="`+href+`"]`))); err != nil {
					t.Fatalf("click %s: %v", href, err)
				}
				got := evalJS[struct{ BarTop, BarBottom, Top, ScrollY, MaxScroll float64 }](t, ctx, `(() => { const bar = document.querySelector('nav.sections').getBoundingClientRect();
				  const s = document.querySelector('`+href+`').getBoundingClientRect();
				  return {barTop: bar.top, barBottom: bar.bottom, top: s.top, scrollY: window.scrollY,
				    maxScroll: document.documentElement.scrollHeight - window.innerHeight}; })()`)
				if got.BarTop != 0 {
					t.Errorf("at %d px, after %s: the section bar's top is at %.0f px, want 0 (on screen)", w.width, href, got.BarTop)
				}
				atEnd := got.ScrollY >= got.MaxScroll-1 // the last sections cannot scroll higher
				if got.Top < got.BarBottom-1 || (got.Top > got.BarBottom+16 && !atEnd) || got.Top > float64(w.height)/2 {
					t.Errorf("at %d px, after %s: the section starts at %.0f px, want just under the bar (%.0f px)", w.width, href, got.Top, got.BarBottom)
				}
			}

		})
	}

	// The events: 25, newest first, the request ID shortened and whole on
	// demand, older ones a link away.
	ev := evalJS[struct {
		Rows               int
		Shown, Full, Title string
		Older              bool
	}](t, ctx, `(() => { const r = document.querySelectorAll('#events tr.event-row');
	  const td = document.querySelector('#events td.request-id details').parentElement;
	  return {rows: r.length, shown: td.querySelector('summary').textContent, full: td.querySelector('details').textContent,
	    title: td.title, older: !!document.getElementById('events-older')}; })()`)
	if ev.Rows != 25 || !ev.Older {
		t.Errorf("events: %d rows, older link %v; want 25 and a link to older ones", ev.Rows, ev.Older)
	}
	if len([]rune(ev.Shown)) > 9 || len(ev.Title) <= 10 || !strings.HasSuffix(ev.Full, ev.Title) {
		t.Errorf("a long request ID: shown %q, unfolded %q, title %q; want at most 9 characters, the whole ID on demand", ev.Shown, ev.Full, ev.Title)
	}

	// An alert's one-tap answer: pause PK, whose velocity alert is live;
	// PK's row then says it is paused.
	pause := `#alerts .alert-row[data-subject="PK"] form[data-kind="country_pause"] button`
	err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/ops?refresh=0"),
		chromedp.WaitVisible(chromedp.CSS(pause)), chromedp.Click(chromedp.CSS(pause)),
		chromedp.WaitVisible(chromedp.CSS(`#overrides-flash`)))
	if err != nil {
		t.Fatalf("pause PK from its alert: %v", err)
	}
	row := oc.ops(t, 0, "GET", "/ops/overrides", "").json(t)["overrides"].([]any)
	if len(row) != 1 || row[0].(map[string]any)["kind"] != "country_pause" || row[0].(map[string]any)["subject"] != "PK" {
		t.Fatalf("overrides after the alert's pause: %v, want PK paused", row)
	}
	pk, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#countries-hour tr[data-country="PK"] td.limits`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pk, "paused") || !strings.Contains(pk, "override") {
		t.Errorf("PK's row after the pause: %q, want it paused by an override", pk)
	}
	if status, code := oc.send(t, 0, "+923001234567"); status != 403 || code != "country_paused" {
		t.Errorf("a send to PK after the pause: %d %s, want 403 country_paused", status, code)
	}
}

// evalJS evaluates js in the page and returns its value as T.
func evalJS[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %.60s: %v", js, err)
	}
	return v
}
