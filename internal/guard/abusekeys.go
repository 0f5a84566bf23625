package guard

import (
	"fmt"
	"strconv"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The keys of the abuse defences that the ops desk's attack view reads
// (ops.AbuseDesk): the spend budget's windows and a country's velocity
// counters. Exported here, next to the rules that write them, so the view
// never spells a key of its own.

// BudgetKeys are the spend budget's hour and day counters.
func BudgetKeys() (hourKey, dayKey limit.Key) { return budgetHourKey, budgetDayKey }

// VelocityKeys are a country's velocity counters (fields s:<hour>,
// v:<hour>, b:<hour>) and its quarantine (when it ends, unix seconds).
func VelocityKeys(region string) (counters, quarantine limit.Key) {
	return velocityKey(region), quarantineKey(region)
}

// VelocityHour is the hour bucket the country velocity rule counts now in.
func VelocityHour(now int64) int64 { return now / 3600 }

// FloorFor is the country's velocity floor, quarantined or not (see
// velocityScript in the store).
func (v CountryVelocity) FloorFor(region string, quarantined bool) int64 {
	fl := v.floor(region)
	if quarantined {
		return max(1, fl/10)
	}
	return fl
}

// PrefixLimits are per_prefix and the coarser prefix_depths, finest
// first: depth 0 is per_prefix, depth i prefix_depths[i-1].
func (p OTPPolicy) PrefixLimits() []PrefixWindow {
	return append([]PrefixWindow{p.PerPrefix}, p.PrefixDepths...)
}

// Usage says how far past its limit a refused request was, for the audit
// trail and the ops page: "5 of 3 per 10m". count is the counter after
// the refused hit (0: unknown, only the limit is named).
func Usage(count, limit int64, window time.Duration) string {
	w := window.String()
	switch {
	case window%time.Hour == 0 && window > 0:
		w = strconv.FormatInt(int64(window/time.Hour), 10) + "h"
	case window%time.Minute == 0 && window > 0:
		w = strconv.FormatInt(int64(window/time.Minute), 10) + "m"
	}
	if count <= 0 {
		return fmt.Sprintf("limit %d per %s", limit, w)
	}
	return fmt.Sprintf("%d of %d per %s", count, limit, w)
}
