package simulate

import (
	"fmt"
	"math"
	"strings"
)

// The geometry of a chart, in the units of its SVG viewBox: the plot
// sits inside the margins, the y axis's figures on the left and the
// hours under it.
const (
	chartWidth   = 960
	chartHeight  = 240
	chartLeft    = 56
	chartRight   = 8
	chartTop     = 10
	chartBottom  = 30
	plotWidth    = chartWidth - chartLeft - chartRight
	plotHeight   = chartHeight - chartTop - chartBottom
	maxXLabels   = 12
	maxYTicks    = 4
	barGroupFill = 0.8 // of an hour's width the three bars take
)

// chart is one population's campaign hour by hour: a group of three
// bars per hour (sent, challenged, refused). It is drawn in Go as inline
// SVG, so the page needs nothing from outside and every bar stands for
// a figure of the report's hours.
type chart struct {
	Name, Role string
	Groups     []barGroup
	Ticks      []tick  // the y axis's figures
	Labels     []label // the hours named under the plot
}

// barGroup is one hour of a chart.
type barGroup struct {
	Hour                             int
	Title                            string // what a pointer on the hour shows
	Tried, Sent, Challenged, Refused int
	Bars                             []bar
}

// bar is one figure of an hour, as a rectangle.
type bar struct {
	Class      string // sent, challenged or refused
	X, Y, W, H string
}

type tick struct {
	Y    string
	Text string
}

type label struct {
	X    string
	Text string
}

// charts are the report's charts, one per population in the scenario's
// order.
func (r *Report) charts() []chart {
	var out []chart
	for _, name := range r.order {
		out = append(out, r.chart(name))
	}
	return out
}

func (r *Report) chart(name string) chart {
	c := chart{Name: name, Role: r.roles[name]}
	top := 0
	for _, h := range r.Hours {
		p := h.Populations[name]
		top = max(top, p.Sent, p.Challenged, p.Refused)
	}
	step, ceiling := axis(top)
	for v := 0; v <= ceiling; v += step {
		c.Ticks = append(c.Ticks, tick{Y: coord(chartTop + plotHeight - float64(v)/float64(ceiling)*plotHeight), Text: itoa(v)})
	}
	n := len(r.Hours)
	slot := float64(plotWidth) / float64(max(n, 1))
	width := slot * barGroupFill / 3
	every := labelEvery(n)
	for i, h := range r.Hours {
		p := h.Populations[name]
		x := chartLeft + float64(i)*slot
		g := barGroup{Hour: h.Hour, Tried: p.Tried, Sent: p.Sent, Challenged: p.Challenged, Refused: p.Refused,
			Title: fmt.Sprintf("%s UTC: tried %d, sent %d, challenged %d, refused %d%s%s", h.Start.UTC().Format("01-02 15:04"),
				p.Tried, p.Sent, p.Challenged, p.Refused, refusedBy(p.RefusedByCode), returningOf(p))}
		for j, f := range []struct {
			class string
			v     int
		}{{"sent", p.Sent}, {"challenged", p.Challenged}, {"refused", p.Refused}} {
			height := float64(f.v) / float64(ceiling) * plotHeight
			g.Bars = append(g.Bars, bar{Class: f.class, X: coord(x + slot*(1-barGroupFill)/2 + float64(j)*width),
				Y: coord(chartTop + plotHeight - height), W: coord(width), H: coord(height)})
		}
		c.Groups = append(c.Groups, g)
		if i%every == 0 {
			text := h.Start.UTC().Format("15:04")
			if i == 0 || h.Start.UTC().Hour() == 0 {
				text = h.Start.UTC().Format("01-02 15:04")
			}
			c.Labels = append(c.Labels, label{X: coord(x + slot/2), Text: text})
		}
	}
	return c
}

// axis is the y axis's step and top for figures up to top: a step of 1,
// 2 or 5 times a power of ten, at most maxYTicks of them.
func axis(top int) (step, ceiling int) {
	for pow := 1; ; pow *= 10 {
		for _, m := range []int{1, 2, 5} {
			step = m * pow
			if ticks := (top + step - 1) / step; ticks <= maxYTicks {
				return step, max(1, ticks) * step
			}
		}
	}
}

// labelEvery is how many hours apart the hours under a chart of n hours
// are named: at most maxXLabels names, on hours that divide a day.
func labelEvery(n int) int {
	for _, k := range []int{1, 2, 3, 4, 6, 12, 24, 48, 72, 168} {
		if (n+k-1)/k <= maxXLabels {
			return k
		}
	}
	return 168
}

// refusedBy is " (unusual_volume 3, cooldown 1)", or nothing.
func refusedBy(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	return " (" + strings.Join(codeList(m), ", ") + ")"
}

// returningOf is "; returning 12 (challenged 0, refused 0)", or nothing
// for an hour without returning tries.
func returningOf(c *Counts) string {
	if c.Returning == 0 {
		return ""
	}
	return fmt.Sprintf("; returning %d (challenged %d, refused %d)", c.Returning, c.ReturningChallenged, c.ReturningRefused)
}

// coord is an SVG coordinate, to a hundredth of a unit.
func coord(v float64) string {
	return fmt.Sprintf("%.2f", math.Round(v*100)/100)
}
