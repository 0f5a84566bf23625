package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// Conversions keeps the conversion watch's sliding windows and the
// claims of its alerts.
type Conversions struct{ keyspace }

var _ guard.Conversions = (*Conversions)(nil)

// conversionBucket is the resolution of the conversion watch's sliding
// window: one-minute buckets.
const conversionBucket = 60 // seconds

// conversionScript counts one event in a subject's sliding window and returns
// the window's {matured sends, verifies} (lua/count_conversion.lua).
var conversionScript = script("count_conversion")

// CountConversion adds one event of kind at now to each subject and
// returns each subject's matured sends and verifies over window (see
// conversionScript). Subjects live in different hash slots (prefixes, a
// country), so each is its own call, sent concurrently: one round trip of
// latency, on a single node or a Cluster.
func (r *Conversions) CountConversion(ctx context.Context, kind guard.ConversionKind, now time.Time, window, delay time.Duration, subjects []limit.Key) ([]guard.Tally, error) {
	secs := max(conversionBucket, int64(window/time.Second))
	delayBuckets := int64((delay + conversionBucket*time.Second - 1) / (conversionBucket * time.Second))
	out := make([]guard.Tally, len(subjects))
	errs := make([]error, len(subjects))
	var wg sync.WaitGroup
	for i, k := range subjects {
		wg.Go(func() {
			key := r.key(k)
			// Run: EVALSHA, and EVAL when the server lost its script cache.
			v, err := conversionScript.Run(ctx, r.rdb, []string{key}, string(kind), secs, conversionBucket, now.Unix(), delayBuckets).Int64Slice()
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("store: count conversion %s: %w", r.logKey(k), err)
			case len(v) != 2:
				errs[i] = fmt.Errorf("store: count conversion %s: script returned %d values, want 2", r.logKey(k), len(v))
			default:
				out[i] = guard.Tally{Sends: v[0], Verifies: v[1]}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

var _ guard.ConversionBatcher = (*Conversions)(nil)

// conversionsScript counts many of the watch's counts in one call
// (lua/count_conversions.lua).
var conversionsScript = script("count_conversions")

// conversionsPerCall bounds the counts of one conversionsScript call: a
// script holds Redis for as long as it runs, and 64 counts (an HGETALL
// of a subject's few dozen fields each) stay well under a millisecond.
const conversionsPerCall = 64

// CountConversions counts a batch of the watch's events (guard/watch.go)
// in one round trip, in the batch's order, so each event's tallies are
// what CountConversion would have answered at its turn. On a single
// Redis, one pipeline of conversionsScript calls, each up to
// conversionsPerCall counts (an event's subjects are one count each), not
// a command to write, run and read per subject. On Redis Cluster the subjects are in different
// hash slots, so each is its own conversionScript call, in one pipeline
// that go-redis sends to their masters, one write per node. No MULTI:
// each script call is atomic alone, and the events are independent.
func (r *Conversions) CountConversions(ctx context.Context, window, delay time.Duration, counts []guard.ConversionCount) ([][]guard.Tally, error) {
	secs := max(conversionBucket, int64(window/time.Second))
	delayBuckets := int64((delay + conversionBucket*time.Second - 1) / (conversionBucket * time.Second))
	if r.cluster {
		return r.countConversionsBySubject(ctx, secs, delayBuckets, counts)
	}
	// flat: each (event, subject) count in order, as out's cells.
	type cell struct{ i, j int }
	var flat []cell
	out := make([][]guard.Tally, len(counts))
	for i, c := range counts {
		out[i] = make([]guard.Tally, len(c.Subjects))
		for j := range c.Subjects {
			flat = append(flat, cell{i, j})
		}
	}
	type call struct {
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	var calls []call
	pipe := r.rdb.Pipeline()
	for start := 0; start < len(flat); start += conversionsPerCall {
		part := flat[start:min(start+conversionsPerCall, len(flat))]
		c := call{args: make([]any, 0, 3+3*len(part))}
		c.args = append(c.args, secs, conversionBucket, delayBuckets)
		index := map[string]int{}
		for _, f := range part {
			cc := counts[f.i]
			key := r.key(cc.Subjects[f.j])
			k, ok := index[key]
			if !ok {
				k = len(c.keys) + 1 // Lua's KEYS count from 1
				index[key] = k
				c.keys = append(c.keys, key)
			}
			c.args = append(c.args, string(cc.Kind), cc.Now.Unix(), k)
		}
		c.cmd = conversionsScript.EvalSha(ctx, pipe, c.keys, c.args...)
		calls = append(calls, c)
	}
	// Each reply is read below: a NOSCRIPT is one command's answer.
	if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
		return nil, fmt.Errorf("store: count conversions: %w", err)
	}
	next := 0
	for _, c := range calls {
		cmd := c.cmd
		if isNoScript(cmd.Err()) {
			// The server lost its script cache: this call did not run, nor
			// did the batch's later ones (the same script): they run again,
			// one by one, still in the batch's order.
			cmd = conversionsScript.Run(ctx, r.rdb, c.keys, c.args...)
		}
		v, err := cmd.Int64Slice()
		n := (len(c.args) - 3) / 3
		switch {
		case err != nil:
			return nil, fmt.Errorf("store: count conversions: %w", err)
		case len(v) != 2*n:
			return nil, fmt.Errorf("store: count conversions: script returned %d values for %d counts", len(v), n)
		}
		for k := range n {
			f := flat[next+k]
			out[f.i][f.j] = guard.Tally{Sends: v[2*k], Verifies: v[2*k+1]}
		}
		next += n
	}
	return out, nil
}

// countConversionsBySubject is CountConversions on Redis Cluster: one
// conversionScript call per event and subject, in one pipeline.
func (r *Conversions) countConversionsBySubject(ctx context.Context, secs, delayBuckets int64, counts []guard.ConversionCount) ([][]guard.Tally, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([][]*redis.Cmd, len(counts))
	args := func(c guard.ConversionCount) []any {
		return []any{string(c.Kind), secs, conversionBucket, c.Now.Unix(), delayBuckets}
	}
	for i, c := range counts {
		cmds[i] = make([]*redis.Cmd, len(c.Subjects))
		for j, k := range c.Subjects {
			cmds[i][j] = conversionScript.EvalSha(ctx, pipe, []string{r.key(k)}, args(c)...)
		}
	}
	// Each reply is read below: a NOSCRIPT is one command's answer.
	if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
		return nil, fmt.Errorf("store: count conversions: %w", err)
	}
	out := make([][]guard.Tally, len(counts))
	for i, c := range counts {
		out[i] = make([]guard.Tally, len(c.Subjects))
		for j, k := range c.Subjects {
			cmd := cmds[i][j]
			if isNoScript(cmd.Err()) {
				// The server lost its script cache: this call did not run,
				// nor did the batch's other calls (one script): they run
				// again one by one, still in the batch's order.
				cmd = conversionScript.Run(ctx, r.rdb, []string{r.key(k)}, args(c)...)
			}
			v, err := cmd.Int64Slice()
			switch {
			case err != nil:
				return nil, fmt.Errorf("store: count conversion %s: %w", r.logKey(k), err)
			case len(v) != 2:
				return nil, fmt.Errorf("store: count conversion %s: script returned %d values, want 2", r.logKey(k), len(v))
			}
			out[i][j] = guard.Tally{Sends: v[0], Verifies: v[1]}
		}
	}
	return out, nil
}

// ClaimAlert sets the subject's alert key if it is not set (SET NX PX):
// the first caller in ttl, on any instance, gets true.
func (r *Conversions) ClaimAlert(ctx context.Context, subject limit.Key, ttl time.Duration) (bool, error) {
	pipe := r.rdb.TxPipeline()
	cmd := pipe.SetNX(ctx, r.key(subject), 1, ttl)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return false, fmt.Errorf("store: claim alert %s: %w", r.logKey(subject), err)
	}
	return cmd.Val(), nil
}

// ReleaseAlert deletes the subject's alert key.
func (r *Conversions) ReleaseAlert(ctx context.Context, subject limit.Key) error {
	if err := r.rdb.Del(ctx, r.key(subject)).Err(); err != nil {
		return fmt.Errorf("store: release alert %s: %w", r.logKey(subject), err)
	}
	return nil
}
