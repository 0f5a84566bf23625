package limit

import (
	"math"
	"time"
)

// Bounds that keep policies sane: a typo such as "window: 10h0000m" should
// fail at start-up, not lock keys out for a year.
const (
	// MaxValue is the largest limit, capacity, local limit or cost a
	// policy or a check may name.
	MaxValue = 1_000_000_000
	// MaxWindow is the longest window, and the longest an empty bucket
	// may take to refill.
	MaxWindow = 31 * 24 * time.Hour
	maxRefill = 1_000_000
)

// Bad reports one problem of a policy: the field it is in and what is wrong.
type Bad func(field, format string, args ...any)

// Validate checks the policy at field (limits.<name>): its algorithm's
// figures, its fallback and its mode. Its name is the policy file's to check.
func (l Policy) Validate(field string, bad Bad) {
	l.validateAlgorithm(field, bad)
	ValidateFallback(field, l.OnStoreError, l.LocalLimit, bad)
	l.validateMode(field, bad)
}

// validateAlgorithm checks a limit's figures for its algorithm, and that
// it sets none of the other algorithm's.
func (l Policy) validateAlgorithm(field string, bad Bad) {
	switch l.Algorithm {
	case TokenBucket:
		if l.Capacity < 1 || l.Capacity > MaxValue {
			bad(field+".capacity", "must be between 1 and %d, got %d", MaxValue, l.Capacity)
		}
		if !(l.RefillPerSecond > 0) || l.RefillPerSecond > maxRefill || math.IsInf(l.RefillPerSecond, 0) {
			bad(field+".refill_per_second", "must be above 0 and at most %d, got %v", maxRefill, l.RefillPerSecond)
		} else if full := time.Duration(float64(l.Capacity) / l.RefillPerSecond * float64(time.Second)); full > MaxWindow {
			bad(field, "an empty bucket takes %s to refill; at most %s", full.Round(time.Second), MaxWindow)
		}
		if l.Limit != 0 || l.Window != 0 {
			bad(field, "limit and window belong to fixed_window; a token_bucket has capacity and refill_per_second")
		}
	case FixedWindow:
		ValidateWindow(field, l.Limit, l.Window, bad)
		if l.Capacity != 0 || l.RefillPerSecond != 0 {
			bad(field, "capacity and refill_per_second belong to token_bucket; a fixed_window has limit and window")
		}
	default:
		bad(field+".algorithm", "must be token_bucket or fixed_window, got %q", l.Algorithm)
	}
}

// validateMode checks a limit's mode: exact, or sync with an interval (and
// never on a policy marked exact).
func (l Policy) validateMode(field string, bad Bad) {
	switch l.Mode {
	case "", ModeExact:
		if l.SyncInterval != 0 {
			bad(field+".sync_interval", "only applies with mode: sync")
		}
	case ModeSync:
		if l.Exact {
			bad(field+".mode", "sync mode is refused on a policy marked exact: true")
		}
		if l.SyncInterval < 10*time.Millisecond || l.SyncInterval > time.Minute {
			bad(field+".sync_interval", "must be between 10ms and 1m, got %s", l.SyncInterval)
		}
	default:
		bad(field+".mode", "must be exact or sync, got %q", l.Mode)
	}
}

// ValidateWindow checks a fixed window: at most limit events per window.
func ValidateWindow(field string, limit int64, window time.Duration, bad Bad) {
	if limit < 1 || limit > MaxValue {
		bad(field+".limit", "must be between 1 and %d, got %d", MaxValue, limit)
	}
	if window < time.Second || window > MaxWindow {
		bad(field+".window", "must be between 1s and %s, got %s", MaxWindow, window)
	} else if window%time.Millisecond != 0 {
		bad(field+".window", "must be a whole number of milliseconds")
	}
}

// ValidateFallback checks a policy's on_store_error and the local_limit
// that goes with it.
func ValidateFallback(field string, m FallbackMode, localLimit int64, bad Bad) {
	switch m {
	case FallbackClosed, FallbackOpen:
		if localLimit != 0 {
			bad(field+".local_limit", "only applies with on_store_error: local")
		}
	case FallbackLocal:
		if localLimit < 1 || localLimit > MaxValue {
			bad(field+".local_limit", "must be set (1 to %d) with on_store_error: local", MaxValue)
		}
	default:
		bad(field+".on_store_error", "must be closed, local or open, got %q", m)
	}
}
