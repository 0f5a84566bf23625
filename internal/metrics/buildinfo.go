package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterBuildInfo registers otpguard_build_info: always 1, with the
// build's version, VCS revision and Go version as labels.
func (m *Set) RegisterBuildInfo(version, revision, goVersion string) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "otpguard_build_info",
		Help:        "Always 1: the version, Go version and VCS revision of this build, as labels.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": goVersion, "revision": revision},
	}, func() float64 { return 1 }))
}
