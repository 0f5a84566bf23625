package main

import (
	"runtime/debug"
)

// The collector's defaults. A busy server's small live heap makes Go's own
// GOGC=100 collect several times a second, often enough that a p99 request
// meets a collection; GOGC=400 collects a quarter as often for a little
// more memory (docs/benchmarks.md). The soft memory limit keeps a server
// whose live heap grows (many hot keys, a large deny-list) from taking 5x
// it: near the limit the collector runs more often instead.
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 512 << 20 // bytes
)

// tuneGC sets the collector's defaults unless the user chose: GOGC set
// (GOGC=100 is Go's own behaviour, and then no memory limit is set either)
// or GOMEMLIMIT set (the user's limit stays). It reports what it set: the
// GC percent and the memory limit, 0 for what it left alone.
func tuneGC(getenv func(string) string) (gcPercent int, memoryLimit int64) {
	if getenv("GOGC") != "" {
		return 0, 0
	}
	debug.SetGCPercent(defaultGCPercent)
	if getenv("GOMEMLIMIT") != "" {
		return defaultGCPercent, 0
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
	return defaultGCPercent, defaultMemoryLimit
}
