package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// serverFigures are what the attacked otpguard says of itself on /metrics:
// read before and after the attack, their difference tells how the
// decisions were made and what they cost the server.
type serverFigures struct {
	Decisions, Fallback, Shed, Late, FromMemory float64
	CPUSeconds                                  float64
}

// serverMetrics sums the series the load report needs from url/metrics.
func serverMetrics(ctx context.Context, url string) (serverFigures, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return serverFigures{}, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return serverFigures{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return serverFigures{}, fmt.Errorf("GET /metrics: %s", res.Status)
	}
	return parseServerMetrics(res.Body)
}

func parseServerMetrics(r io.Reader) (serverFigures, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return serverFigures{}, fmt.Errorf("read /metrics: %w", err)
	}
	sum := func(name string) float64 {
		var total float64
		if f, ok := families[name]; ok {
			for _, m := range f.GetMetric() {
				switch {
				case m.GetCounter() != nil:
					total += m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					total += m.GetGauge().GetValue()
				case m.GetUntyped() != nil:
					total += m.GetUntyped().GetValue()
				}
			}
		}
		return total
	}
	return serverFigures{
		Decisions:  sum("otpguard_decisions_total"),
		Fallback:   sum("otpguard_fallback_decisions_total"),
		Shed:       sum("otpguard_shed_total"),
		Late:       sum("otpguard_redis_late_total"),
		FromMemory: sum("otpguard_decisions_from_memory_total"),
		CPUSeconds: sum("process_cpu_seconds_total"),
	}, nil
}

// printServerFigures reports the difference after - before.
func printServerFigures(out io.Writer, before, after serverFigures, answered float64) {
	d := serverFigures{
		Decisions: after.Decisions - before.Decisions, Fallback: after.Fallback - before.Fallback,
		Shed: after.Shed - before.Shed, Late: after.Late - before.Late,
		FromMemory: after.FromMemory - before.FromMemory, CPUSeconds: after.CPUSeconds - before.CPUSeconds,
	}
	share := func(n float64) string {
		if d.Decisions <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f%%", 100*n/d.Decisions)
	}
	fmt.Fprintf(out, "server        %.0f decisions: %.0f from the fallback (%s), %.0f from memory (%s), %.0f answered late by a healthy Redis, %.0f shed (503 overloaded)\n",
		d.Decisions, d.Fallback, share(d.Fallback), d.FromMemory, share(d.FromMemory), d.Late, d.Shed)
	if answered > 0 {
		fmt.Fprintf(out, "server CPU    %.1f µs per answered request (%.2f CPU-seconds)\n", 1e6*d.CPUSeconds/answered, d.CPUSeconds)
	}
}
