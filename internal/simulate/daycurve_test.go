package simulate

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDayCurveDailyTotal holds docs/simulate.md's "The day's total" to
// the code: the shares it lists are DayCurve's, a day of a population of
// peak_per_hour p tries factor × p times (counted minute by minute, as a
// run does), and its example of N a day is N / factor.
func TestDayCurveDailyTotal(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "simulate.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var shares []float64
	for _, m := range regexp.MustCompile(`(?m)^share((?: +[0-9.]+)+)$`).FindAllStringSubmatch(doc, -1) {
		for _, f := range strings.Fields(m[1]) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatal(err)
			}
			shares = append(shares, v)
		}
	}
	if len(shares) != len(DayCurve) || [24]float64(shares) != DayCurve {
		t.Errorf("docs/simulate.md's shares by hour: %v, want DayCurve's %v", shares, DayCurve)
	}
	m := regexp.MustCompile("\\*\\*([0-9.]+) × `peak_per_hour`\\*\\*").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/simulate.md: no \"**<factor> × `peak_per_hour`**\"")
	}
	factor, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}

	const peak = 1000.0
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	s := &Scenario{Start: start, Duration: Duration(24 * time.Hour)}
	ps := &popState{p: &Population{PeakPerHour: peak}, acc: 0.5}
	tries := 0
	for m := start; m.Before(start.Add(24 * time.Hour)); m = m.Add(time.Minute) {
		tries += ps.tries(s, m)
	}
	if want := factor * peak; math.Abs(float64(tries)-want) > 1 {
		t.Errorf("a day at peak_per_hour %v: %d tries, want the documented %v × %v = %v", peak, tries, factor, peak, want)
	}

	ex := regexp.MustCompile("([0-9,]+) a day is `peak_per_hour: ([0-9]+)` \\(([0-9,]+) a\\s+day\\)").FindStringSubmatch(doc)
	if ex == nil {
		t.Fatal("docs/simulate.md: no \"N a day is `peak_per_hour: P` (M a day)\" example")
	}
	perDay, peakEx, got := number(t, ex[1]), number(t, ex[2]), number(t, ex[3])
	if want := math.Round(perDay / factor); peakEx != want {
		t.Errorf("the example: %v a day is peak_per_hour %v, want %v", perDay, peakEx, want)
	}
	if want := math.Floor(peakEx * factor); got != want {
		t.Errorf("the example: peak_per_hour %v makes %v a day, want %v", peakEx, got, want)
	}
}

// TestDayCurvePartOfADay: docs/simulate.md's campaign of part of a day
// gets the sum of its hours' shares.
func TestDayCurvePartOfADay(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "simulate.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("from ([0-9]{2}):00 to ([0-9]{2}):00 gets ([0-9.]+) × `peak_per_hour`").FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("docs/simulate.md: no \"from HH:00 to HH:00 gets F × `peak_per_hour`\"")
	}
	from, to, factor := int(number(t, m[1])), int(number(t, m[2])), number(t, m[3])
	sum := 0.0
	for h := from; h < to; h++ {
		sum += DayCurve[h]
	}
	if math.Abs(sum-factor) > 1e-9 {
		t.Errorf("from %02d:00 to %02d:00: documented %v × peak_per_hour, DayCurve sums to %v", from, to, factor, sum)
	}
}

func number(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
