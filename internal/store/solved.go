package store

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
)

// The solved tier's cap (guard/challenge.go) goes where the velocity
// rule's count goes (a guard.VolumeTake with Solved set): in the send's
// round trip on a single Redis, last on Cluster, refunded by the velocity
// rule's refund script (it counts "s:<hour>" fields the same way).

var solvedScript = script("take_solved")

// solvedTTL is how long a country's solved counts outlive their last
// write: the hour under way matters, and a refund an hour late.
const solvedTTL = 2 * time.Hour

// volumeCall is the script, keys and arguments of a VolumeTake: the
// velocity rule's, or the solved cap's.
func (r *Velocity) volumeCall(t guard.VolumeTake) (*redis.Script, []string, []any) {
	if t.Solved == nil {
		keys, args := r.volumeArgs(t)
		return velocityScript, keys, args
	}
	// The number's cached risk answer, read with the count (KEYS[5],
	// ARGV[9]); without one, KEYS[5] repeats KEYS[1].
	risk := r.key(t.Key)
	if t.Risk.ID != "" {
		risk = r.key(t.Risk)
	}
	return solvedScript,
		[]string{r.key(t.Key), r.key(t.Quarantine), r.key(t.Solved.Base), r.key(t.Solved.Used), risk},
		[]any{t.Hour, t.Lookback, t.Floor, int64(solvedTTL / time.Second), t.Now.Unix(),
			max(1, t.Solved.TTL.Milliseconds()), t.Unverified.NormalDefault, t.Unverified.NormalMin, flag(t.Risk.ID != "")}
}
