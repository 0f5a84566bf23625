// Package resilience owns what otpguard does when Redis is slow or down:
// the breaker that stops waiting on a dead Redis, the probe that vouches for
// a live one, the fallback that decides from memory by each policy's
// on_store_error (and makes the code calls through the same breaker), and
// its status. It also owns the hot-key local counters of sync-mode policies
// and the in-memory limiter the fallback decides with.
//
// It wraps guard's interfaces (limit.Counter, guard.Codes) and is wired in
// by internal/app; guard never imports it.
package resilience
