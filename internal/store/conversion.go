package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
)

var _ guard.Conversions = (*Redis)(nil)

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
func (r *Redis) CountConversion(ctx context.Context, kind guard.ConversionKind, now time.Time, window, delay time.Duration, subjects []guard.Key) ([]guard.Tally, error) {
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

var _ guard.ConversionBatcher = (*Redis)(nil)

// CountConversions counts a batch of the watch's events (guard/watch.go)
// in one round trip: one pipeline (no MULTI: each script call is atomic
// alone, and the events are independent) of conversionScript calls, in the
// batch's order, so each event's tallies are what CountConversion would
// have answered at its turn. On Redis Cluster go-redis sends the pipeline's
// commands to their masters, one write per node.
func (r *Redis) CountConversions(ctx context.Context, window, delay time.Duration, counts []guard.ConversionCount) ([][]guard.Tally, error) {
	secs := max(conversionBucket, int64(window/time.Second))
	delayBuckets := int64((delay + conversionBucket*time.Second - 1) / (conversionBucket * time.Second))
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
func (r *Redis) ClaimAlert(ctx context.Context, subject guard.Key, ttl time.Duration) (bool, error) {
	pipe := r.rdb.TxPipeline()
	cmd := pipe.SetNX(ctx, r.key(subject), 1, ttl)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return false, fmt.Errorf("store: claim alert %s: %w", r.logKey(subject), err)
	}
	return cmd.Val(), nil
}

// ReleaseAlert deletes the subject's alert key.
func (r *Redis) ReleaseAlert(ctx context.Context, subject guard.Key) error {
	if err := r.rdb.Del(ctx, r.key(subject)).Err(); err != nil {
		return fmt.Errorf("store: release alert %s: %w", r.logKey(subject), err)
	}
	return nil
}

// ClaimDelivery sets the key of messageID's status report if it is not set
// (SET NX PX): the first caller in ttl, on any instance, gets true, so a
// replayed status callback is recorded once. The message id is the hash
// tag.
func (r *Redis) ClaimDelivery(ctx context.Context, messageID, status string, ttl time.Duration) (bool, error) {
	k := guard.Key{Space: "sms", ID: messageID, Name: "status:" + status}
	pipe := r.rdb.TxPipeline()
	cmd := pipe.SetNX(ctx, r.key(k), 1, ttl)
	// SET NX of a key already set replies nil (redis.Nil): not the first.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("store: claim delivery: %w", err)
	}
	return cmd.Val(), nil
}
