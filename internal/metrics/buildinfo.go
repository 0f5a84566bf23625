package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterBuildInfo registers otpguard_build_info: always 1, with the
// version (version, or the module's when empty), the Go version and the
// VCS revision the binary was built from.
func (m *Set) RegisterBuildInfo(version string) {
	revision := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" && bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "otpguard_build_info",
		Help:        "Always 1: the version, Go version and VCS revision of this build, as labels.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version(), "revision": revision},
	}, func() float64 { return 1 }))
}
