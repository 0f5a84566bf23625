package problem

import (
	"math"
	"time"
)

// RetrySeconds is d as the whole seconds of a Retry-After header, rounded
// up and at least 1: a client told "0" would retry at once and be refused
// again. Every place that tells a wait in seconds (the header, the RateLimit
// field's t, a message) rounds with it, so that they agree.
func RetrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
