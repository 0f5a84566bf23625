package opsweb

import (
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/ops"
)

// timeLeft says how long a block lasts, for people.
func timeLeft(until, now time.Time) string {
	if until.IsZero() {
		return "until removed"
	}
	d := until.Sub(now).Round(time.Second)
	switch {
	case d <= 0:
		return "ending"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// chart is the inline SVG of sends and blocks per minute.
type chart struct {
	W, H, Left, Base      int
	Bars                  []chartBar
	Sends, Blocks, Peak   int64
	FirstLabel, LastLabel string
}

type chartBar struct {
	Class      string
	X, Y, W, H float64
	Title      string
}

// newChart lays out one pair of bars per minute: sends, then blocks.
func newChart(mins []ops.MinuteActivity) *chart {
	const (
		slot   = 12.0 // px per minute
		bar    = 5.0
		left   = 28
		top    = 8
		height = 120
	)
	ch := &chart{W: left + int(slot)*len(mins), H: top + height + 16, Left: left, Base: top + height}
	for _, m := range mins {
		ch.Sends += m.Sends
		ch.Blocks += m.Blocks
		ch.Peak = max(ch.Peak, m.Sends, m.Blocks)
	}
	if len(mins) > 0 {
		ch.FirstLabel = mins[0].Minute.UTC().Format("15:04")
		ch.LastLabel = mins[len(mins)-1].Minute.UTC().Format("15:04") + " UTC"
	}
	scale := float64(height) / float64(max(ch.Peak, 1))
	for i, m := range mins {
		x := float64(left) + float64(i)*slot + 1
		at := m.Minute.UTC().Format("15:04")
		for j, v := range []int64{m.Sends, m.Blocks} {
			if v == 0 {
				continue
			}
			h := max(float64(v)*scale, 1)
			class, what := "sends", "sent"
			if j == 1 {
				class, what = "blocks", "blocked"
			}
			ch.Bars = append(ch.Bars, chartBar{Class: class, X: x + float64(j)*bar, Y: float64(ch.Base) - h, W: bar, H: h,
				Title: fmt.Sprintf("%s: %d %s", at, v, what)})
		}
	}
	return ch
}
