package store

import (
	"context"
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
// og:otp:tr:{<country>}:<128-bit HMAC, base64url>, with a TTL of
// otp.trust.verified_within renewed at each verify. Its value is the time
// (unix seconds of the service's clock) from which it counts: "1" for a
// mark that counts at once, a later time for a held one (lib/mark.lua
// reads it for every script; readMarkScript for the Go side). A key of
// its own per number keeps expiry exact and the layout plain Redis 7.0 (a
// hash bucketed by a prefix of the HMAC would be smaller, but its fields
// cannot expire one by one before Redis 7.4's HPEXPIRE); docs/benchmarks.md
// states the bytes per number. The country hash tag lets the velocity
// script read the mark with the count (velocityScript), and the mark's
// script read the country's counts when it decides a hold.

// trustMarkScript sets one mark, crediting a trusted number's verify and
// holding a mark earned in an abnormal hour (lua/trust_mark.lua).
var trustMarkScript = script("trust_mark")

// readMarkScript reads one mark at a time (lua/read_trust_mark.lua).
var readMarkScript = script("read_trust_mark")

// MarkTrusted sets the marks, each for ttl, in one round trip (a pipeline;
// on Cluster go-redis sends it one per node). A verify's mark (Credit)
// goes through trustMarkScript, which credits the verify of a trusted
// number or of a trusted send's code to its tier, and writes the mark
// held when its hour was abnormal (m.Hold), judged by the mark's
// carrier's counts while the carriers split the country (m.Carrier); an
// import's is a plain SET with PX, never held: idempotent. It answers how
// many verifies it credited there (trusted verifies), how many marks it
// held, and how many of the marks' hours its carriers judged.
func (r *TrustMarks) MarkTrusted(ctx context.Context, marks []guard.TrustMark, ttl time.Duration) (guard.Marked, error) {
	if len(marks) == 0 {
		return guard.Marked{}, nil
	}
	pipe := r.rdb.Pipeline()
	type scripted struct {
		cmd  *redis.Cmd
		keys []string
		args []any
	}
	var runs []scripted
	var imports []guard.TrustMark
	for _, m := range marks {
		if !m.Credit {
			pipe.Set(ctx, r.key(m.Key), "1", ttl)
			if m.Tier.ID != "" {
				imports = append(imports, m)
			}
			continue
		}
		keys := []string{r.key(m.Key), r.key(m.Tier), r.key(m.Tier), r.key(m.Tier)}
		hold, carrierShare := int64(0), 0.0
		if m.Hold > 0 && m.Volume.ID != "" {
			keys[2], keys[3], hold = r.key(m.Volume), r.key(m.Volume), int64(m.Hold/time.Second)
			if m.CarrierFloorShare > 0 && m.Carrier.ID != "" {
				keys[3], carrierShare = r.key(m.Carrier), m.CarrierFloorShare
			}
		}
		args := []any{ttl.Milliseconds(), 1, m.Hour, int64(m.TTL / time.Second), flag(m.SentTrusted),
			m.Now.Unix(), hold, m.Floor, m.Factor, carrierShare}
		runs = append(runs, scripted{trustMarkScript.EvalSha(ctx, pipe, keys, args...), keys, args})
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !isNoScript(err) {
		return guard.Marked{}, fmt.Errorf("store: mark trusted: %w", err)
	}
	var res guard.Marked
	for _, s := range runs {
		if isNoScript(s.cmd.Err()) { // it did not run: once more, loading it
			s.cmd = trustMarkScript.Run(ctx, r.rdb, s.keys, s.args...)
		}
		v, err := s.cmd.Int64Slice()
		if err != nil {
			return guard.Marked{}, fmt.Errorf("store: mark trusted: %w", err)
		}
		if len(v) != 3 {
			return guard.Marked{}, fmt.Errorf("store: mark trusted: script returned %d values, want 3", len(v))
		}
		res.Trusted += int(v[0])
		res.Held += int(v[1])
		res.ByCarrier += int(v[2])
	}
	if err := r.countImports(ctx, imports); err != nil {
		return guard.Marked{}, err
	}
	return res, nil
}

// countImports counts imported marks in their country's trusted tier,
// "i:<hour>" of the tier's hash (the velocity rule's layout, so that it
// leaves the hash with the lookback), and drops the hour's cached warmth
// ("w:<hour>" of the country's counts, lua/take_volume.lua), so that the
// next send reads the import: per country one MULTI of HINCRBY, EXPIRE
// (no hash without a TTL) and HDEL, on keys of one hash tag. An import
// names at most guard.MaxTrustImport numbers, a few countries.
func (r *TrustMarks) countImports(ctx context.Context, imports []guard.TrustMark) error {
	if len(imports) == 0 {
		return nil
	}
	type tier struct {
		tier, volume limit.Key
		hour         int64
	}
	counts, ttls := map[tier]int64{}, map[tier]time.Duration{}
	var order []tier
	for _, m := range imports {
		k := tier{m.Tier, m.Volume, m.Hour}
		if _, ok := counts[k]; !ok {
			order = append(order, k)
		}
		counts[k]++
		ttls[k] = m.TTL
	}
	pipe := r.rdb.TxPipeline()
	for _, k := range order {
		key := r.key(k.tier)
		pipe.HIncrBy(ctx, key, fmt.Sprintf("i:%d", k.hour), counts[k])
		pipe.Expire(ctx, key, ttls[k])
		if k.volume.ID != "" {
			pipe.HDel(ctx, r.key(k.volume), fmt.Sprintf("w:%d", k.hour))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: count imports: %w", err)
	}
	return nil
}

// Trusted reports whether mark counts at now: set, and not held past now
// (readMarkScript, one round trip).
func (r *TrustMarks) Trusted(ctx context.Context, mark limit.Key, now time.Time) (bool, error) {
	return readMark(ctx, r.rdb, r.key(mark), now)
}

// readMark runs readMarkScript on the mark key at now.
func readMark(ctx context.Context, rdb rediser, key string, now time.Time) (bool, error) {
	n, err := readMarkScript.Run(ctx, rdb, []string{key}, now.Unix()).Int64()
	if err != nil {
		return false, fmt.Errorf("store: read trust mark: %w", err)
	}
	return n == 1, nil
}
