package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/guard"
)

// The widget's solve time, measured with -solvetimes=N (a measure, never
// an assertion: docs/abuse.md quotes the figures).
//
// Chromium's CPU throttling (Emulation.setCPUThrottlingRate, DevTools' 4x)
// slows the page's main thread only: Chromium refuses it on worker
// targets ("Operation is only supported for pages, not workers"), and
// ALTCHA's widget solves in Web Workers, so a throttled page solves as
// fast as an unthrottled one. To bring the widget's own solver under the
// throttle, mainThreadWorkers replaces the page's Worker, before any of
// its scripts run, with one that runs the worker's script (the widget's,
// unmodified) on the page's main thread, every worker of the widget on
// that one throttled thread. The runs of both kinds are logged: the
// hashing itself is WebCrypto's, on Chromium's own threads, so the
// throttle shows little even there (docs/abuse.md).

// solveSpy notes how long each widget of the page took from starting to
// solve to saying verified: ALTCHA's statechange events, seen on their
// way down to the widget.
const solveSpy = `window.__solves = [];
document.addEventListener('statechange', (e) => {
  const s = e.detail && e.detail.state;
  if (s === 'verifying') window.__solveStart = performance.now();
  if (s === 'verified') window.__solves.push(performance.now() - window.__solveStart);
}, true);`

// mainThreadWorkers is a Worker that runs its script on the main thread:
// the script (fetched from its blob URL) gets a self of its own, with
// onmessage, postMessage and the URL and location it reads.
const mainThreadWorkers = `window.Worker = class MainThreadWorker extends EventTarget {
  constructor(url) {
    super();
    this.done = false;
    const scope = {
      URL: { revokeObjectURL() {} },
      location: { href: String(url) },
      onmessage: null,
      postMessage: (data) => setTimeout(() => {
        if (!this.done) this.dispatchEvent(new MessageEvent('message', { data: structuredClone(data) }));
      }),
    };
    this.ready = fetch(url).then((r) => r.text()).then((code) => { new Function('self', code)(scope); return scope; });
  }
  postMessage(data) {
    const copy = structuredClone(data);
    this.ready.then((scope) => setTimeout(() => {
      if (!this.done && scope.onmessage) scope.onmessage({ data: copy });
    }));
  }
  terminate() { this.done = true; }
};`

// solveMode is one way of running the widget that measureSolves measures.
type solveMode struct {
	name       string
	rate       float64 // Chromium's CPU throttling
	mainThread bool    // the widget's workers on the page's main thread
}

// measureSolves runs n sign-ins through the page in each mode and logs the
// median and p95 of the widget's own solve time (the payload's took) and
// of the wait until it says verified (at least its minDuration, 500 ms).
func measureSolves(t *testing.T, ctx context.Context, base string, rec *recorder, n int) {
	t.Helper()
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: solveSpy}); err != nil {
		t.Fatal(err)
	}
	cores, err := chromedp.Run(ctx, chromedp.Evaluate[int](`navigator.hardwareConcurrency`))
	if err != nil {
		t.Fatal(err)
	}
	modes := []solveMode{
		{"workers, CPU 1x", 1, false},
		{"workers, CPU 4x", 4, false},
		{"main thread, CPU 1x", 1, true},
		{"main thread, CPU 4x", 4, true},
	}
	for m, mode := range modes {
		var shim page.ScriptIdentifier
		if mode.mainThread {
			res, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: mainThreadWorkers})
			if err != nil {
				t.Fatal(err)
			}
			shim = res.Identifier
		}
		if _, err := chromedp.Call(ctx, emulation.SetCPUThrottlingRate, emulation.SetCPUThrottlingRateParams{Rate: mode.rate}); err != nil {
			t.Fatal(err)
		}
		var took, waited []float64
		for i := range n {
			phone := fmt.Sprintf("+4474002%02d%03d", m, i)
			if state, text := askCode(t, ctx, base, phone); state != "sent" {
				t.Fatalf("%s, solve %d: %s %q", mode.name, i, state, text)
			}
			took = append(took, *decodePayload(t, rec.last(t, phone).Altcha).Took)
			w, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`window.__solves`))
			if err != nil || len(w) != 1 {
				t.Fatalf("%s, solve %d: the spy saw %v (%v), want one solve", mode.name, i, w, err)
			}
			waited = append(waited, w[0])
		}
		t.Logf("%s (%d cores, the widget's %d workers), %d solves at max_number %d: solve (took) median %s, p95 %s; until verified median %s, p95 %s",
			mode.name, cores, cores, n, guard.DefaultChallengeMaxNumber,
			ms(quantile(took, 0.5)), ms(quantile(took, 0.95)), ms(quantile(waited, 0.5)), ms(quantile(waited, 0.95)))
		if shim != "" {
			if _, err := chromedp.Call(ctx, page.RemoveScriptToEvaluateOnNewDocument, page.RemoveScriptToEvaluateOnNewDocumentParams{Identifier: shim}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := chromedp.Call(ctx, emulation.SetCPUThrottlingRate, emulation.SetCPUThrottlingRateParams{Rate: 1}); err != nil {
		t.Fatal(err)
	}
}

// quantile is the nearest-rank q-quantile of xs.
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, i)]
}

func ms(v float64) string {
	return (time.Duration(v) * time.Millisecond).Round(time.Millisecond).String()
}
