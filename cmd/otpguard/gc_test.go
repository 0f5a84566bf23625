package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestTuneGC: with neither GOGC nor GOMEMLIMIT set, otpguard sets its GC
// percent and a soft memory limit; the user's GOGC leaves both alone (Go's
// own behaviour), the user's GOMEMLIMIT leaves the limit alone.
func TestTuneGC(t *testing.T) {
	// The process's settings, restored after: they are the runtime's.
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})
	for _, tc := range []struct {
		name        string
		env         map[string]string
		wantPercent int
		wantLimit   int64
	}{
		{"defaults", map[string]string{}, defaultGCPercent, defaultMemoryLimit},
		{"GOGC set", map[string]string{"GOGC": "100"}, 100, math.MaxInt64},
		{"GOGC off", map[string]string{"GOGC": "off"}, 100, math.MaxInt64},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, defaultGCPercent, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100) // as the runtime would have read the GOGC of the test's process
			debug.SetMemoryLimit(math.MaxInt64)
			tuneGC(func(k string) string { return tc.env[k] })
			if got := debug.SetGCPercent(100); got != tc.wantPercent {
				t.Errorf("GC percent %d, want %d", got, tc.wantPercent)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Errorf("memory limit %d, want %d", got, tc.wantLimit)
			}
		})
	}
}
