package store

// The single-check scripts, for tests that call them the way the store
// did before (inside a MULTI) to compare what Redis spends.
var (
	TokenBucketScriptForTest = tokenBucketScript
	WindowTakeScriptForTest  = windowTakeScript
)

// Interval is interval, for tests that build script arguments.
var Interval = interval
