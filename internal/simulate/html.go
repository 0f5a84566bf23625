package simulate

import (
	_ "embed"
	"html/template"
	"io"
	"time"
)

// reportPage is the HTML report: one page with everything inline (its
// CSS, the charts as SVG), so that it opens from a file, a mail or a CI
// artefact with no network and no asset beside it.
//
//go:embed report.html
var reportPage string

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{"usd": usd, "percent": percent}).Parse(reportPage))

// page is what the HTML report shows.
type page struct {
	Title   string
	Start   time.Time
	Hours   string
	Lines   []headline
	Summary *Summary
	Charts  []chart
	// The charts' geometry, for the template.
	Width, Height, PlotLeft, PlotRight, PlotBottom, TextY int
}

// WriteHTML writes the report as one self-contained HTML page, titled
// title (the scenario): the summary (the same figures as WriteTable's
// and the JSON's) and a chart per population of what it was sent,
// challenged and refused in each hour of the campaign.
func (r *Report) WriteHTML(w io.Writer, title string) error {
	start, hours := r.span()
	return reportTemplate.Execute(w, page{
		Title: title, Start: start.UTC(), Hours: plural(hours, "hour"), Lines: r.headlines(), Summary: r.Summary, Charts: r.charts(),
		Width: chartWidth, Height: chartHeight, PlotLeft: chartLeft, PlotRight: chartWidth - chartRight,
		PlotBottom: chartTop + plotHeight, TextY: chartTop + plotHeight + 18,
	})
}
