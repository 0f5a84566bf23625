package httpapi_test

import (
	"slices"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// refreshSpy runs before the page's own script in every document: it
// records what setInterval was asked to schedule (and keeps the callback,
// so the test can run one tick itself) and counts fetches. Injected by
// DevTools, it is not subject to the page's CSP.
const refreshSpy = `(function () {
  var spy = window.__refresh = { delays: [], ticks: [], fetches: 0 };
  var setInterval = window.setInterval, fetch = window.fetch;
  window.setInterval = function (fn, ms) {
    spy.delays.push(ms); spy.ticks.push(fn);
    return setInterval.apply(this, arguments);
  };
  window.fetch = function () { spy.fetches++; return fetch.apply(this, arguments); };
})();`

// TestOpsPageRefreshInChromium: in a real browser the page's script
// schedules a refresh every 30 s, and ?refresh=0 schedules none. The test
// never waits for the interval: it runs the scheduled callback itself. One
// tick fetches the page and swaps the live sections in place (a new event
// appears, the document is not reloaded); a tick while an input has the
// focus, or after someone typed, fetches nothing.
func TestOpsPageRefreshInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	base := oc.instances[0].srv.URL
	ctx := browsertest.Headless(t, exe, 2*time.Minute)
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: refreshSpy}); err != nil {
		t.Fatalf("adding the spy: %v", err)
	}
	eval := func(js string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js))
		if err != nil {
			t.Fatalf("evaluating %s: %v", js, err)
		}
		return v
	}
	delays := func() []float64 {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`window.__refresh.delays`))
		if err != nil {
			t.Fatalf("reading the scheduled intervals: %v", err)
		}
		return v
	}
	fetches := func() float64 { t.Helper(); return eval(`window.__refresh.fetches`).(float64) }

	signInChromium(t, ctx, base, `#events`)
	if got := delays(); !slices.Equal(got, []float64{30000}) {
		t.Fatalf("intervals scheduled by the page: %v ms, want one of 30000", got)
	}

	// One tick: the new event shows up in place.
	if err := oc.nodes[0].db.WriteEvents(t.Context(), []guard.Event{{Action: guard.ActionOTPSend, Outcome: "sent",
		Phone: "+14155550199", Country: "US", Detail: "arrived-after-load"}}); err != nil {
		t.Fatal(err)
	}
	eval(`window.__sameDocument = true; document.activeElement.blur(); window.__refresh.ticks[0](); true`)
	opsWait(t, "the new event in the refreshed events section", func() bool {
		return eval(`document.querySelector('#events').textContent.includes('arrived-after-load')`) == true
	})
	if eval(`window.__sameDocument === true`) != true {
		t.Error("the tick reloaded the page; want the sections swapped in place")
	}
	if got := fetches(); got != 1 {
		t.Errorf("one tick made %v fetches, want 1", got)
	}
	if s := eval(`document.getElementById('refreshed').textContent`); s == "" {
		t.Error("#refreshed does not say when the page was updated")
	}

	// While an input has the focus, a tick fetches nothing; a focus alone
	// is not typing, so once it leaves, ticks fetch again.
	eval(`document.querySelector('#event-filter input[name="number"]').focus(); window.__refresh.ticks[0](); true`)
	if got := fetches(); got != 1 {
		t.Errorf("a tick with the focus in an input fetched (%v fetches, want 1)", got)
	}
	eval(`document.getElementById('refreshed').textContent = ''; document.activeElement.blur(); window.__refresh.ticks[0](); true`)
	if got := fetches(); got != 2 {
		t.Errorf("a tick after the focus left fetched %v times in all, want 2", got)
	}
	// The swap replaces the input typed into next: wait for it to be done
	// (#refreshed, outside the live sections, is set last).
	opsWait(t, "the second tick's sections swapped in", func() bool {
		return eval(`document.getElementById('refreshed').textContent !== ''`) == true
	})
	// After typing, ticks stop: what was typed is not swapped away.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#event-filter input[name="number"]`), "+1415")); err != nil {
		t.Fatal(err)
	}
	eval(`document.activeElement.blur(); window.__refresh.ticks[0](); true`)
	if got := fetches(); got != 2 {
		t.Errorf("a tick after typing fetched (%v fetches, want 2)", got)
	}

	// Paused: nothing is scheduled.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ops?refresh=0"), chromedp.WaitVisible(chromedp.CSS(`#events`))); err != nil {
		t.Fatal(err)
	}
	if got := delays(); len(got) != 0 {
		t.Errorf("a paused page scheduled intervals of %v ms, want none", got)
	}
}
