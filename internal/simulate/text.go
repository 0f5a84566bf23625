package simulate

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// tableWidth is the widest line WriteTable writes, so that the report
// reads in a terminal of 100 columns without wrapping: a population's
// name is a heading of its own rather than a column, and what can grow
// without bound (the refusals by code) is wrapped.
const tableWidth = 100

// WriteTable writes the report for a person at a terminal: the summary
// first (a row per population and, with an attacker's population, the
// summary by role), then each population's hours and total, its
// refusals by code and, when the run has them, what became of its
// returning tries, its risk lookups and its tries by carrier.
func (r *Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	start, hours := r.span()
	fmt.Fprintf(bw, "campaign: %s from %s UTC\n\n", plural(hours, "hour"), start.UTC().Format("2006-01-02 15:04"))
	g := grid{left: 1}
	g.add("population", "role", "tried", "sent", "without a code", "cost USD")
	for _, l := range r.headlines() {
		g.add(l.Name, l.Role, itoa(l.Tried), itoa(l.Sent), fmt.Sprintf("%d (%s)", l.WithoutCode, l.Percent), usd(l.Cost))
	}
	g.write(bw)
	if s := r.Summary; s != nil {
		fmt.Fprintf(bw, "\nreal users without a code: %d of %d (%s)\nattackers' SMS: %d of %d tried (%s), %s USD\nrisk lookups: %d, %s USD\n",
			s.UsersWithoutCode, s.UsersTried, percent(s.UsersWithoutCode, s.UsersTried),
			s.AttackersSent, s.AttackersTried, percent(s.AttackersSent, s.AttackersTried), usd(s.AttackersCost), s.Lookups, usd(s.LookupCost))
		if s.UsersFallbackSends+s.AttackersFallbackSends > 0 {
			fmt.Fprintf(bw, "codes by the fallback channel (not in sent, nor cost): users %d, attackers %d\n",
				s.UsersFallbackSends, s.AttackersFallbackSends)
		}
	}
	if len(r.Services) > 0 {
		var sg grid // a SID is long: no returning column
		sg.add("service", "tried", "sent", "challenged", "refused", "verified", "cost USD")
		for _, svc := range slices.Sorted(maps.Keys(r.Services)) {
			sg.add(svc, countCells(r.Services[svc])[:6]...)
		}
		fmt.Fprintln(bw)
		sg.write(bw)
	}
	for _, name := range r.order {
		r.writePopulation(bw, name)
	}
	return bw.Flush()
}

// writePopulation writes one population's hours (those it tried in),
// its total and what the total's rows leave out.
func (r *Report) writePopulation(w io.Writer, name string) {
	fmt.Fprintf(w, "\n%s (%s), by hour (UTC)\n", name, r.roles[name])
	var g grid
	g.add("hour", "tried", "sent", "challenged", "refused", "verified", "cost USD", "returning")
	for _, h := range r.Hours {
		if c := h.Populations[name]; c.Tried > 0 {
			g.add(h.Start.UTC().Format("01-02 15:04"), countCells(c)...)
		}
	}
	total := r.Populations[name]
	g.add("total", countCells(total)...)
	g.write(w)
	for _, line := range wrap("refused by code: ", codeList(total.RefusedByCode), tableWidth) {
		fmt.Fprintln(w, line)
	}
	if total.FallbackSends > 0 {
		fmt.Fprintf(w, "fallback: %d codes by the fallback channel (not in sent, nor cost)\n", total.FallbackSends)
	}
	if total.Returning > 0 { // the goal: 0 challenged, 0 refused
		fmt.Fprintf(w, "returning: %d tries to trusted numbers, %d of them challenged, %d refused\n",
			total.Returning, total.ReturningChallenged, total.ReturningRefused)
	}
	if r.lookups() {
		fmt.Fprintf(w, "risk lookups: %d, %s USD\n", total.Lookups, usd(total.LookupCost))
	}
	if len(total.Carriers) > 0 {
		var cg grid
		cg.add("carrier", "tried", "sent", "challenged", "refused")
		for _, carrier := range slices.Sorted(maps.Keys(total.Carriers)) {
			cc := total.Carriers[carrier]
			cg.add(carrier, itoa(cc.Tried), itoa(cc.Sent), itoa(cc.Challenged), itoa(cc.Refused))
		}
		cg.write(w)
	}
}

// countCells are the cells of an hour's (or the total's) row after the
// first.
func countCells(c *Counts) []string {
	return []string{itoa(c.Tried), itoa(c.Sent), itoa(c.Challenged), itoa(c.Refused), itoa(c.Verified), usd(c.Cost), itoa(c.Returning)}
}

// grid is a table of text: the first column (a name) aligned left, and
// as many more as left says (words, such as a role); the others
// (figures) right; two spaces apart.
type grid struct {
	rows [][]string
	left int
}

func (g *grid) add(first string, rest ...string) {
	g.rows = append(g.rows, append([]string{first}, rest...))
}

func (g *grid) write(w io.Writer) {
	var widths []int
	for _, row := range g.rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range g.rows {
		var b strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			switch {
			case i == 0:
				b.WriteString(cell + pad)
			case i <= g.left:
				b.WriteString("  " + cell + pad)
			default:
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// wrap lays items out after prefix, ", " apart, in lines of at most
// width runes (an item longer than a line gets a line of its own),
// the lines after the first indented under the first item; "-" for
// no item.
func wrap(prefix string, items []string, width int) []string {
	if len(items) == 0 {
		items = []string{"-"}
	}
	indent := strings.Repeat(" ", utf8.RuneCountInString(prefix))
	var lines []string
	line := prefix + items[0]
	for _, item := range items[1:] {
		// One place kept for the comma a break would add.
		if utf8.RuneCountInString(line)+len(", ")+utf8.RuneCountInString(item)+len(",") > width {
			lines = append(lines, line+",")
			line = indent + item
			continue
		}
		line += ", " + item
	}
	return append(lines, line)
}

func itoa(n int) string { return strconv.Itoa(n) }

func usd(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// plural is "1 hour", "3 hours".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
