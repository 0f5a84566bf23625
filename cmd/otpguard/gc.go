package main

import (
	"runtime/debug"
)

// The collector's defaults. At Go's own GOGC=100 a server answering
// 10,000 checks a second (a live heap of about 9 MB, some 5 KB allocated
// per check) starts a collection every ~200 ms and marks for ~8 ms of it:
// about 4 % of the time a request may meet a collection, more than the
// 1 % a p99 looks at. GOGC=400 makes it one collection a second, ~1 % of
// the time, for about 35 MB more RSS (docs/benchmarks.md, "Allocations per
// check, and the collector"). The soft memory limit keeps a server whose
// live heap grows (many hot keys, a large deny-list) from taking 5x it:
// near the limit the collector runs more often instead.
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
