package simulate

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
)

// TestHTMLReportInChromium renders the HTML report of a real run in
// Chromium and reads it as a person sees it: each population's chart has
// a group of bars for every hour of the campaign, each group's figures
// are the JSON's for that hour and its bars stand as tall as those
// figures, the summary's figures are the JSON's, and the page loaded
// nothing from anywhere. It leaves a screenshot in the artefacts.
func TestHTMLReportInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	rep, doc := realReport(t)
	var page bytes.Buffer
	if err := rep.WriteHTML(&page, "report-scenario.yaml"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, page.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := browsertest.Headless(t, exe, 2*time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path)); err != nil {
		t.Fatal(err)
	}

	type group struct {
		Hour                             int
		Tried, Sent, Challenged, Refused int
		Heights                          map[string]float64 // by bar class, in CSS pixels as drawn
	}
	type figure struct {
		Population string
		Groups     []group
	}
	figures, err := chromedp.Run(ctx, chromedp.Evaluate[[]figure](`[...document.querySelectorAll('figure.chart')].map(f => ({
		population: f.dataset.population,
		groups: [...f.querySelectorAll('g.hour')].map(g => ({
			hour: +g.dataset.hour, tried: +g.dataset.tried, sent: +g.dataset.sent,
			challenged: +g.dataset.challenged, refused: +g.dataset.refused,
			heights: Object.fromEntries([...g.querySelectorAll('rect')].map(r => [r.getAttribute('class'), r.getBoundingClientRect().height])),
		})),
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(figures) != len(rep.order) {
		t.Fatalf("charts: got %d, want one per population (%d)", len(figures), len(rep.order))
	}
	for i, f := range figures {
		if f.Population != rep.order[i] {
			t.Errorf("chart %d: %q, want %q", i, f.Population, rep.order[i])
		}
		if len(f.Groups) != len(doc.Hours) {
			t.Errorf("%s: %d hours drawn, want the campaign's %d", f.Population, len(f.Groups), len(doc.Hours))
			continue
		}
		// px is the height of one try, from the tallest bar.
		px := 0.0
		for _, g := range f.Groups {
			for _, class := range []string{"sent", "challenged", "refused"} {
				if v := figureOf(g.Sent, g.Challenged, g.Refused, class); v > 0 {
					px = max(px, g.Heights[class]/float64(v))
				}
			}
		}
		for h, g := range f.Groups {
			want := doc.Hours[h].Populations[f.Population]
			if g.Hour != doc.Hours[h].Hour || g.Tried != want.Tried || g.Sent != want.Sent || g.Challenged != want.Challenged || g.Refused != want.Refused {
				t.Errorf("%s, hour %d: drawn %+v, want the JSON's hour %d: tried %d, sent %d, challenged %d, refused %d",
					f.Population, h, g, doc.Hours[h].Hour, want.Tried, want.Sent, want.Challenged, want.Refused)
			}
			for _, class := range []string{"sent", "challenged", "refused"} {
				height, ok := g.Heights[class]
				v := float64(figureOf(want.Sent, want.Challenged, want.Refused, class))
				if !ok || math.Abs(height-v*px) > 0.5 {
					t.Errorf("%s, hour %d: the %s bar is %.2f px tall, want %.2f (%v at %.3f px each)", f.Population, h, class, height, v*px, v, px)
				}
			}
		}
		if px == 0 {
			t.Errorf("%s: no bar drawn", f.Population)
		}
	}

	type row struct {
		Population string
		Fields     map[string]string
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](`[...document.querySelectorAll('table.summary tbody tr')].map(tr => ({
		population: tr.dataset.population,
		fields: Object.fromEntries([...tr.querySelectorAll('td')].map(td => [td.dataset.field, td.textContent])),
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(doc.Populations) {
		t.Errorf("the summary's rows: got %d, want one per population (%d)", len(rows), len(doc.Populations))
	}
	for _, r := range rows {
		c, ok := doc.Populations[r.Population]
		if !ok {
			t.Errorf("the summary names %q, which the JSON does not", r.Population)
			continue
		}
		for field, want := range map[string]float64{"tried": float64(c.Tried), "sent": float64(c.Sent),
			"without_code": float64(c.Tried - c.Sent), "cost": c.Cost} {
			if got, err := strconv.ParseFloat(r.Fields[field], 64); err != nil || got != want {
				t.Errorf("the summary's %s of %s: %q, want the JSON's %v", field, r.Population, r.Fields[field], want)
			}
		}
		if want := percent(c.Tried-c.Sent, c.Tried); r.Fields["percent"] != want {
			t.Errorf("the summary's share without a code of %s: %q, want %q", r.Population, r.Fields["percent"], want)
		}
	}
	byRole, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll('[data-summary]')].map(s => [s.dataset.summary, s.textContent]))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(byRole) != len(doc.Summary) {
		t.Errorf("the summary by role: got %v, want the JSON's %v", byRole, doc.Summary)
	}
	for key, want := range doc.Summary {
		if got, err := strconv.ParseFloat(byRole[key], 64); err != nil || got != want {
			t.Errorf("the summary's %s: %q, want the JSON's %v", key, byRole[key], want)
		}
	}

	loaded, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`performance.getEntriesByType('resource').map(e => e.name)`))
	if err != nil || len(loaded) != 0 {
		t.Errorf("the page loaded %v (%v); want nothing: one self-contained page", loaded, err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1100, 1000)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(browsertest.ArtifactDir(t), "simulate-report.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func figureOf(sent, challenged, refused int, class string) int {
	switch class {
	case "sent":
		return sent
	case "challenged":
		return challenged
	}
	return refused
}

// TestHTMLSelfContained: the page names nothing outside itself (no
// address, stylesheet, script or image to fetch), and draws every
// population's chart even when a population never tried.
func TestHTMLSelfContained(t *testing.T) {
	rep := wideReport(t)
	rep.order = append(rep.order, "GB quiet")
	rep.roles["GB quiet"] = RoleUser
	rep.Populations["GB quiet"] = newCounts()
	for _, h := range rep.Hours {
		h.Populations["GB quiet"] = newCounts()
	}
	var page strings.Builder
	if err := rep.WriteHTML(&page, "wide <scenario>.yaml"); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, outside := range []string{"http:", "https:", "//", "src=", "href=", "<link", "@import", "url(", "<script"} {
		if strings.Contains(html, outside) {
			t.Errorf("the page contains %q: it must need nothing from outside", outside)
		}
	}
	if got, want := strings.Count(html, `<g class="hour"`), len(rep.order)*len(rep.Hours); got != want {
		t.Errorf("hour groups: got %d, want %d (%d populations, %d hours)", got, want, len(rep.order), len(rep.Hours))
	}
	if !strings.Contains(html, "wide &lt;scenario&gt;.yaml") {
		t.Errorf("the title is not escaped")
	}
}
