package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// backend is a Redis the store tests run against.
type backend struct {
	rdb    *redis.Client
	prefix string
	mini   *miniredis.Miniredis // set for the miniredis backend
}

// backends returns the real Redis (always) and miniredis (the embedded
// default must run the same scripts).
func backends(t *testing.T) map[string]func(t *testing.T) backend {
	return map[string]func(t *testing.T) backend{
		"redis": func(t *testing.T) backend {
			tg := redistest.New(t)
			return backend{rdb: redistest.Client(t, tg.URL), prefix: tg.Prefix}
		},
		"miniredis": func(t *testing.T) backend {
			m := miniredis.RunT(t)
			return backend{rdb: redistest.Client(t, "redis://"+m.Addr()), prefix: redistest.Prefix(), mini: m}
		},
	}
}

func fw(id string, lim int64, window time.Duration, cost int64) limit.Take {
	return limit.Take{Key: limit.Key{Space: "lim:t", ID: id, Name: "fw"}, Algorithm: limit.FixedWindow, Limit: lim, Window: window, Cost: cost}
}

func tb(id string, capacity int64, rate float64, cost int64) limit.Take {
	return limit.Take{Key: limit.Key{Space: "lim:t", ID: id, Name: "tb"}, Algorithm: limit.TokenBucket, Limit: capacity, Rate: rate, Cost: cost}
}

func take1(t *testing.T, s *store.Redis, tk limit.Take) limit.Result {
	t.Helper()
	res, err := s.Counters.Take(context.Background(), []limit.Take{tk})
	if err != nil {
		t.Fatalf("Take(%v): %v", tk.Key, err)
	}
	return res[0]
}

func TestFixedWindowCountsAndExpires(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			for i := int64(1); i <= 4; i++ {
				r := take1(t, s, fw("a", 3, time.Minute, 1))
				if want := i <= 3; r.Allowed != want {
					t.Fatalf("hit %d: allowed = %v, want %v", i, r.Allowed, want)
				}
				if want := max(0, 3-i); r.Remaining != want {
					t.Errorf("hit %d: remaining = %d, want %d", i, r.Remaining, want)
				}
				if r.ResetAfter <= 0 || r.ResetAfter > time.Minute {
					t.Errorf("hit %d: reset after = %v, want in (0, 1m]", i, r.ResetAfter)
				}
				if !r.Allowed && r.RetryAfter != r.ResetAfter {
					t.Errorf("hit %d: retry after = %v, want the window's rest %v", i, r.RetryAfter, r.ResetAfter)
				}
			}
			key := b.prefix + "lim:t:{a}:fw"
			ttl, err := b.rdb.PTTL(context.Background(), key).Result()
			if err != nil || ttl <= 0 || ttl > time.Minute {
				t.Fatalf("PTTL %s = %v, %v; want in (0, 1m]", key, ttl, err)
			}
		})
	}
}

// TestFixedWindowExactUnderConcurrency fires many concurrent hits from
// several clients (standing in for several otpguard instances).
func TestFixedWindowExactUnderConcurrency(t *testing.T) {
	b := backends(t)["redis"](t)
	const instances, hits, lim = 4, 200, 37
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range instances {
		c := redistest.Client(t, "redis://"+b.rdb.Options().Addr)
		s := store.NewRedis(c, b.prefix)
		for j := range hits / instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Counters.Take(context.Background(), []limit.Take{fw("burst", lim, time.Minute, 1)})
				if err != nil {
					t.Errorf("instance %d hit %d: %v", i, j, err)
					return
				}
				if res[0].Allowed {
					allowed.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if got := allowed.Load(); got != lim {
		t.Fatalf("allowed %d of %d concurrent hits, want exactly %d", got, hits, lim)
	}
}

func TestTokenBucket(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			if b.mini != nil {
				// miniredis moves TIME with the wall clock but TTLs only on
				// FastForward (otpguard drives both together when embedded):
				// stop the clock so the bucket read back cannot drift.
				b.mini.SetTime(time.Now())
			}
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			// The bucket is full again 5s after the first take, by the
			// clock it was emptied with: every figure read back below lies
			// between 5s minus the time this test has taken since then
			// (however busy the machine) and 5s (plus the millisecond the
			// key's expiry is rounded up to, and the one PTTL truncates
			// "now" by). A missing, halved or doubled TTL falls outside.
			start := time.Now()
			window := func(what string, got time.Duration, slack time.Duration) {
				t.Helper()
				if lo, hi := 5*time.Second-time.Since(start), 5*time.Second+slack; got < lo || got > hi {
					t.Errorf("%s = %v, want in [%v, %v]: the bucket is full 5s after the first take", what, got, lo, hi)
				}
			}
			// A missing key is a full bucket: 5 tokens, then empty.
			for i := int64(1); i <= 5; i++ {
				r := take1(t, s, tb("u", 5, 1, 1))
				if !r.Allowed || r.Remaining != 5-i {
					t.Fatalf("take %d: allowed %v remaining %d, want true %d", i, r.Allowed, r.Remaining, 5-i)
				}
			}
			r := take1(t, s, tb("u", 5, 1, 1))
			if r.Allowed || r.Spent {
				t.Fatalf("6th take: allowed %v spent %v, want a denial that spends nothing", r.Allowed, r.Spent)
			}
			if r.RetryAfter <= 0 || r.RetryAfter > time.Second {
				t.Errorf("retry after = %v, want in (0, 1s] at 1 token/s", r.RetryAfter)
			}
			window("reset after", r.ResetAfter, 0)
			// The key lives exactly until the bucket is full again.
			key := b.prefix + "lim:t:{u}:tb"
			ttl, err := b.rdb.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			window("PTTL", ttl, 2*time.Millisecond)
			// Peeking (cost 0) spends nothing.
			if p := take1(t, s, tb("u", 5, 1, 0)); !p.Allowed || p.Spent || p.Remaining != 0 {
				t.Errorf("peek: %+v, want allowed, unspent, remaining 0", p)
			}
			// A deleted key behaves as a full bucket.
			b.rdb.Del(ctx, key)
			if r := take1(t, s, tb("u", 5, 1, 2)); !r.Allowed || r.Remaining != 3 {
				t.Errorf("after DEL: %+v, want allowed with 3 left", r)
			}
			// Cost above what is left is denied without spending.
			if r := take1(t, s, tb("u", 5, 1, 4)); r.Allowed {
				t.Errorf("cost 4 with 3 left: allowed, want denied")
			}
		})
	}
}

// TestTokenBucketRemainingFractionalInterval holds the reported figure to
// the admission when a token's interval is not a whole number of
// microseconds (3/s: 333333.33 µs; 6/s: 166666.67 µs): a full bucket less
// what one take spent is capacity - cost, never one lower (or -1).
func TestTokenBucketRemainingFractionalInterval(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			if b.mini != nil {
				b.mini.SetTime(time.Now())
			}
			s := store.NewRedis(b.rdb, b.prefix)
			for _, rate := range []float64{3, 6, 0.3, 30, 300_000} {
				for _, capacity := range []int64{1, 2, 3, 10} {
					for _, cost := range []int64{1, 2} {
						if cost > capacity {
							continue
						}
						id := fmt.Sprintf("frac-%v-%d-%d", rate, capacity, cost)
						r := take1(t, s, tb(id, capacity, rate, cost))
						if !r.Allowed || r.Remaining != capacity-cost {
							t.Errorf("%v/s, capacity %d, take %d of a full bucket: allowed %v remaining %d, want true %d",
								rate, capacity, cost, r.Allowed, r.Remaining, capacity-cost)
						}
					}
				}
			}
		})
	}
}

func TestTokenBucketRefills(t *testing.T) {
	t.Parallel() // its own Redis (or key prefix)
	b := backends(t)["redis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	ctx := context.Background()
	// redisNow reads the clock the script refills by.
	redisNow := func() time.Time {
		t.Helper()
		now, err := b.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now
	}
	// 10 tokens a second: empty it, wait 300ms, expect 3. The tokens that
	// came back are bounded, both ways, by Redis's own clock read around
	// the last take and the peek: no allowance for how busy this machine is.
	for range 3 {
		take1(t, s, tb("r", 4, 10, 1))
	}
	beforeLast := redisNow()
	last := take1(t, s, tb("r", 4, 10, 1))
	afterLast := redisNow()
	time.Sleep(300 * time.Millisecond)
	beforePeek := redisNow()
	r := take1(t, s, tb("r", 4, 10, 0))
	afterPeek := redisNow()
	if !last.Allowed {
		t.Fatalf("4th take of a bucket of 4: denied")
	}
	const every = 100 * time.Millisecond
	lo := min(4, int64(beforePeek.Sub(afterLast)/every))
	hi := min(4, last.Remaining+int64(afterPeek.Sub(beforeLast)/every)+1)
	if lo < 3 {
		t.Fatalf("Redis's clock moved %v in a 300ms sleep", beforePeek.Sub(afterLast))
	}
	if r.Remaining < lo || r.Remaining > hi {
		t.Fatalf("%v to %v after the last take at 10/s: %d tokens, want between %d and %d",
			beforePeek.Sub(afterLast), afterPeek.Sub(beforeLast), r.Remaining, lo, hi)
	}
}

func TestRefund(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			if b.mini != nil {
				// miniredis keeps a TTL as a duration from the SET and
				// answers PEXPIRETIME as its clock plus that duration: on
				// a clock that moves (time.Now), the bucket's TAT read
				// back drifts later by the milliseconds since the take,
				// and the refunded bucket then reads a token short. Held
				// still, its clock keeps TTLs exact, as the embedded
				// Redis's driven clock does between ticks.
				b.mini.SetTime(time.Now())
			}
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			w, k := fw("rf", 2, time.Minute, 1), tb("rf", 2, 0.01, 1)
			take1(t, s, w)
			take1(t, s, k)
			if err := s.Counters.Refund(ctx, []limit.Take{w, k}); err != nil {
				t.Fatal(err)
			}
			if r := take1(t, s, fw("rf", 2, time.Minute, 0)); r.Remaining != 2 {
				t.Errorf("window after refund: remaining %d, want 2", r.Remaining)
			}
			if r := take1(t, s, tb("rf", 2, 0.01, 0)); r.Remaining != 2 {
				t.Errorf("bucket after refund: remaining %d, want 2", r.Remaining)
			}
			// Refunding what does not exist creates nothing.
			gone := fw("never", 2, time.Minute, 1)
			if err := s.Counters.Refund(ctx, []limit.Take{gone, tb("never", 2, 1, 1)}); err != nil {
				t.Fatal(err)
			}
			n, _ := b.rdb.Exists(ctx, b.prefix+"lim:t:{never}:fw", b.prefix+"lim:t:{never}:tb").Result()
			if n != 0 {
				t.Errorf("refund created %d keys, want 0", n)
			}
		})
	}
}

func TestScriptFlushIsSurvived(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Client(t, srv.URL())
	s := store.NewRedis(c, "p:")
	ctx := context.Background()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	take1(t, s, tb("f", 3, 1, 1))
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The batch holds a fixed window too: it must count once, not twice,
	// although the transaction is sent again for the script.
	res, err := s.Counters.Take(ctx, []limit.Take{tb("f", 3, 1, 1), fw("f", 5, time.Minute, 1)})
	if err != nil {
		t.Fatalf("Take after SCRIPT FLUSH: %v", err)
	}
	if !res[0].Allowed || res[0].Remaining != 1 {
		t.Errorf("bucket after flush: %+v, want allowed with 1 left", res[0])
	}
	if res[1].Remaining != 4 {
		t.Errorf("window after flush: remaining %d, want 4 (counted once)", res[1].Remaining)
	}
	c.ScriptFlush(ctx)
	if err := s.Counters.Refund(ctx, []limit.Take{tb("f", 3, 1, 1)}); err != nil {
		t.Fatalf("Refund after SCRIPT FLUSH: %v", err)
	}
	c.ScriptFlush(ctx)
	if _, err := s.Codes.SaveCode(ctx, newCode("+14155550100", []byte("mac"))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Codes.GuessCode(ctx, "+14155550100", guard.GuessOf{}, time.Now()); err != nil {
		t.Fatalf("GuessCode after SCRIPT FLUSH: %v", err)
	}
}

func TestCodes(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			const phone = "+919800000000"
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, time.Now()); !errors.Is(err, guard.ErrNotFound) {
				t.Fatalf("guess without code: %v, want ErrNotFound", err)
			}
			if _, err := s.Codes.SaveCode(ctx, newCode(phone, []byte{0, 1, 2, 255})); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				g, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if g.Attempts != i || !bytes.Equal(g.MAC, []byte{0, 1, 2, 255}) || g.TTL <= 0 {
					t.Fatalf("guess %d: %+v, want attempts %d and the stored mac", i, g, i)
				}
			}
			// A new code resets the guess count.
			if prev, err := s.Codes.SaveCode(ctx, newCode(phone, []byte("new"))); err != nil || prev != 3 {
				t.Errorf("SaveCode over a code guessed 3 times: %d, %v; want 3", prev, err)
			}
			if g, _ := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, time.Now()); g.Attempts != 1 {
				t.Errorf("after a new code: attempts %d, want 1", g.Attempts)
			}
			if c, _ := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("old"), time.Now()); c == guard.ConsumedOK {
				t.Errorf("consumed with a stale mac")
			}
			if c, _ := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("new"), time.Now()); c != guard.ConsumedOK {
				t.Errorf("consume with the live mac failed")
			}
			if c, _ := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("new"), time.Now()); c == guard.ConsumedOK {
				t.Errorf("consumed twice")
			}
		})
	}
}

// TestFixedWindowPeek: a cost-0 take reads a window and never writes it. A
// peek at a fresh key creates nothing (it would start the window early),
// and a peek after hits reports the count and the TTL and changes neither.
func TestFixedWindowPeek(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			key := b.prefix + "lim:t:{pk}:fw"
			peek := func() limit.Result { t.Helper(); return take1(t, s, fw("pk", 3, time.Minute, 0)) }
			state := func() (string, time.Duration) {
				t.Helper()
				v, err := b.rdb.Get(ctx, key).Result()
				if err != nil {
					t.Fatalf("GET %s: %v", key, err)
				}
				return v, b.rdb.PTTL(ctx, key).Val()
			}

			want := limit.Result{Allowed: true, Limit: 3, Remaining: 3, ResetAfter: time.Minute}
			if got := peek(); got != want {
				t.Errorf("peek at a fresh window: %+v, want %+v", got, want)
			}
			if n := b.rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("peek at a fresh window created its key")
			}

			for range 3 {
				take1(t, s, fw("pk", 3, time.Minute, 1))
			}
			// A TTL no hit would set, so a peek that restarted the window shows.
			b.rdb.PExpire(ctx, key, 30*time.Second)
			_, ttlBefore := state()
			got := peek()
			if !got.Allowed || got.Spent || got.Count != 3 || got.Remaining != 0 || got.RetryAfter != 0 {
				t.Errorf("peek at a full window: %+v, want allowed (cost 0 fits), unspent, count 3, remaining 0", got)
			}
			if got.ResetAfter <= 0 || got.ResetAfter > ttlBefore {
				t.Errorf("peek: reset after = %v, want the key's TTL (<= %v)", got.ResetAfter, ttlBefore)
			}
			if v, ttl := state(); v != "3" || ttl <= 0 || ttl > ttlBefore {
				t.Errorf("after peek: value %s, PTTL %v; want 3 and the TTL left as it was (<= %v)", v, ttl, ttlBefore)
			}

			take1(t, s, fw("pk", 3, time.Minute, 1)) // denied, but counted
			got = peek()
			if got.Allowed || got.Spent || got.Count != 4 || got.RetryAfter <= 0 || got.RetryAfter != got.ResetAfter {
				t.Errorf("peek over the limit: %+v, want denied, unspent, count 4, retry after = reset after > 0", got)
			}
			if v, _ := state(); v != "4" {
				t.Errorf("after peek over the limit: value %s, want 4", v)
			}
		})
	}
}

// TestPeekBatchIsOneRoundTrip: peeks travel in the batch's MULTI with the
// hits, and a peek at a missing key (GET answers nil) fails nothing.
func TestPeekBatchIsOneRoundTrip(t *testing.T) {
	b := backends(t)["redis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	ctx := context.Background()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	h := &redistest.RoundTrips{}
	b.rdb.AddHook(h)
	take1(t, s, fw("seen", 5, time.Minute, 2))
	h.Reset()
	res, err := s.Counters.Take(ctx, []limit.Take{
		fw("fresh", 5, time.Minute, 0), tb("b", 5, 1, 1), fw("seen", 5, time.Minute, 0),
		fw("hit", 5, time.Minute, 1), tb("b", 5, 1, 0),
	})
	if err != nil {
		t.Fatalf("Take of a batch with peeks: %v", err)
	}
	if got := h.N(); got != 1 {
		t.Errorf("a batch with peeks took %d round trips, want 1", got)
	}
	for i, want := range []int64{5, 4, 3, 4, 4} {
		if !res[i].Allowed || res[i].Remaining != want {
			t.Errorf("take %d: %+v, want allowed with %d left", i, res[i], want)
		}
	}
	if n := b.rdb.Exists(ctx, b.prefix+"lim:t:{fresh}:fw").Val(); n != 0 {
		t.Errorf("the peek in a batch created its key")
	}
}

// TestRedisErrorsMaskTheNumber: a key names its subject, often a phone
// number, and store errors reach the logs: an error names the key with its
// subject masked.
func TestRedisErrorsMaskTheNumber(t *testing.T) {
	const phone = "+919800000000"
	sends := limit.Take{Key: limit.Key{Space: "otp", ID: phone, Name: "sends"}, Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, Cost: 1}
	checkMasked := func(t *testing.T, what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error, want one", what)
		}
		if strings.Contains(err.Error(), strings.TrimPrefix(phone, "+")) {
			t.Errorf("%s: error %q holds the full number", what, err)
		}
		if want := "otp:{" + guard.MaskPhone(phone) + "}:sends"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q, want the masked key %s in it", what, err, want)
		}
	}
	// The key of a wrong type fails only its own command, so the error is
	// about that key. It must be a private server: SCRIPT FLUSH.
	srv := redistest.Start(t)
	c := redistest.Client(t, srv.URL())
	s := store.NewRedis(c, "p:")
	ctx := context.Background()
	if err := c.HSet(ctx, "p:otp:{"+phone+"}:sends", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}

	unknown := sends
	unknown.Algorithm = "leaky_bucket"
	_, err := s.Counters.Take(ctx, []limit.Take{unknown})
	checkMasked(t, "unknown algorithm", err)

	// The peek of a missing key comes first: its nil reply is what Exec
	// reports, so the failure surfaces per key.
	_, err = s.Counters.Take(ctx, []limit.Take{fw("fresh", 3, time.Minute, 0), sends})
	checkMasked(t, "take of a key of the wrong type", err)

	// After SCRIPT FLUSH the refund is run again by EVAL, key by key.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	checkMasked(t, "refund of a key of the wrong type", s.Counters.Refund(ctx, []limit.Take{sends}))
}

// TestClusterPeekCreatesNothing: on Redis Cluster, peeks travel in each
// slot's script with the hits, one round trip per master, and create no
// limit.
func TestClusterPeekCreatesNothing(t *testing.T) {
	st, rdb, h, _ := clusterStore(t)
	ctx := context.Background()
	ids := limitsOnMasters(t, st, rdb, 3)
	window := func(id string, cost int64) limit.Take {
		return limit.Take{Key: limit.Key{Space: "lim:x", ID: id}, Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, Cost: cost}
	}
	fresh := func(id string) limit.Take {
		tk := window(id, 0)
		tk.Key.Space = "lim:fresh"
		return tk
	}
	var batch []limit.Take
	for _, id := range ids {
		batch = append(batch, fresh(id), window(id, 1), window(id, 0))
	}
	if err := st.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	h.Reset()
	res, err := st.Counters.Take(ctx, batch)
	if err != nil {
		t.Fatalf("Take of a batch with peeks over 3 masters: %v", err)
	}
	if got := h.N(); got != int64(len(ids)) {
		t.Errorf("the batch took %d round trips, want %d (one per master)", got, len(ids))
	}
	for i, id := range ids {
		// The peek after the hit, in the same MULTI, sees it.
		if p, hit, after := res[3*i], res[3*i+1], res[3*i+2]; p.Count != 0 || p.Remaining != 3 || hit.Count != 1 || after.Count != 1 || after.Spent {
			t.Errorf("%s: peek %+v, hit %+v, peek %+v; want counts 0, 1, 1", id, p, hit, after)
		}
		cur, prev, field := st.Counters.LimitHashesForTest(fresh(id))
		if n := rdb.HExists(ctx, cur, field).Val() || rdb.HExists(ctx, prev, field).Val(); n {
			t.Errorf("%s: the peek created its limit", id)
		}
		if n := limitCount(t, st, window(id, 1)); n != 1 {
			t.Errorf("%s: counter = %d; want 1", id, n)
		}
	}
}
