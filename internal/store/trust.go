package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// TrustMarks keeps trusted numbers' marks.
type TrustMarks struct{ keyspace }

var _ guard.Trusts = (*TrustMarks)(nil)

// Trusted numbers' marks (guard/trust.go): one string key per number,
// og:otp:tr:{<country>}:<128-bit HMAC, base64url>, value "1", with a TTL of
// otp.trust.verified_within renewed at each verify. A key of its own per
// number keeps expiry exact and the layout plain Redis 7.0 (a hash bucketed
// by a prefix of the HMAC would be smaller, but its fields cannot expire
// one by one before Redis 7.4's HPEXPIRE); docs/benchmarks.md states the
// bytes per number. The country hash tag lets the velocity script read
// the mark with the count (velocityScript).

// trustMarkScript sets one mark, crediting a trusted number's verify
// (lua/trust_mark.lua).
var trustMarkScript = script("trust_mark")

// MarkTrusted sets the marks, each for ttl, in one round trip (a pipeline;
// on Cluster go-redis sends it one per node). A verify's mark (Credit)
// goes through trustMarkScript, which credits the verify of a trusted
// number or of a trusted send's code to its tier; an import's is a plain
// SET with PX: idempotent. It returns how many verifies it credited there
// (trusted verifies).
func (r *TrustMarks) MarkTrusted(ctx context.Context, marks []guard.TrustMark, ttl time.Duration) (int, error) {
	if len(marks) == 0 {
		return 0, nil
	}
	pipe := r.rdb.Pipeline()
	type scripted struct {
		cmd  *redis.Cmd
		keys []string
		args []any
	}
	var runs []scripted
	for _, m := range marks {
		if !m.Credit {
			pipe.Set(ctx, r.key(m.Key), "1", ttl)
			continue
		}
		keys := []string{r.key(m.Key), r.key(m.Tier)}
		args := []any{ttl.Milliseconds(), 1, m.Hour, int64(m.TTL / time.Second), flag(m.SentTrusted)}
		runs = append(runs, scripted{trustMarkScript.EvalSha(ctx, pipe, keys, args...), keys, args})
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !isNoScript(err) {
		return 0, fmt.Errorf("store: mark trusted: %w", err)
	}
	trusted := 0
	for _, s := range runs {
		if isNoScript(s.cmd.Err()) { // it did not run: once more, loading it
			s.cmd = trustMarkScript.Run(ctx, r.rdb, s.keys, s.args...)
		}
		was, err := s.cmd.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("store: mark trusted: %w", err)
		}
		if was == 1 {
			trusted++
		}
	}
	return trusted, nil
}

// Trusted reports whether mark is set (one EXISTS).
func (r *TrustMarks) Trusted(ctx context.Context, mark limit.Key) (bool, error) {
	cmd := redis.NewIntCmd(ctx, "exists", r.key(mark))
	_ = r.rdb.Process(ctx, cmd)
	n, err := cmd.Result()
	if err != nil {
		return false, fmt.Errorf("store: read trust mark: %w", err)
	}
	return n == 1, nil
}
