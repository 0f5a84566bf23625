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
	keys := []string{r.key(t.Key), r.key(t.Quarantine), r.key(t.Solved.Base), r.key(t.Solved.Used)}
	args := []any{t.Hour, t.Lookback, t.Floor, int64(solvedTTL / time.Second), t.Now.Unix(),
		max(1, t.Solved.TTL.Milliseconds()), t.Unverified.NormalDefault, t.Unverified.NormalMin}
	// The carrier's share of the cap (KEYS[5..8], ARGV[9..11];
	// guard/carriershare.go): its solved counts, its cut, its velocity
	// counts, whose share it reads, and when the country's carriers were
	// first counted. Without one, nothing more is sent.
	if c := t.Carrier; c.FloorShare > 0 {
		keys = append(keys, r.key(c.Key), r.key(c.Cut), r.key(c.Share), r.key(c.Since))
		args = append(args, c.FloorShare, t.HistoryMinSends, int64((time.Duration(t.Lookback+2)*time.Hour)/time.Second))
	}
	return solvedScript, keys, args
}
