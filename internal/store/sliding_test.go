package store_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// sw is a sliding window's take: a day in hourly slices.
func sw(id string, lim, cost int64) limit.Take {
	return limit.Take{Key: limit.Key{Space: "lim:t", ID: id, Name: "sw"}, Algorithm: limit.FixedWindow, Limit: lim,
		Window: 24 * time.Hour, Slice: time.Hour, Cost: cost}
}

// TestSlidingWindowCountsTheLastDay: a sliding day counts the slices of
// the last 24 hours of Redis's clock, the one under way included, and
// none older (deleted); a refund gives back in its hit's slice only,
// never below zero, never creating one; an hour later the oldest slice
// has left the window.
func TestSlidingWindowCountsTheLastDay(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			ctx := context.Background()
			now := time.Now()
			if b.mini != nil {
				b.mini.SetTime(now)
			} else {
				var err error
				if now, err = b.rdb.Time(ctx).Result(); err != nil {
					t.Fatal(err)
				}
			}
			s := store.NewRedis(b.rdb, b.prefix)
			key := b.prefix + "lim:t:{day}:sw"
			slice := now.UnixMilli() / time.Hour.Milliseconds()
			if now.Add(time.Minute).UnixMilli()/time.Hour.Milliseconds() != slice {
				t.Skip("within a minute of the hour's end: the slice under way could change mid-test") // the real clock only
			}
			if err := b.rdb.HSet(ctx, key, strconv.FormatInt(slice-24, 10), 7, strconv.FormatInt(slice-23, 10), 5).Err(); err != nil {
				t.Fatal(err)
			}
			w := sw("day", 8, 1)
			for i, want := range []struct {
				count   int64
				allowed bool
			}{{6, true}, {7, true}, {8, true}, {9, false}} {
				got := take1(t, s, w)
				if got.Count != want.count || got.Allowed != want.allowed || got.WindowID != slice {
					t.Errorf("hit %d: count %d allowed %v slice %d, want %d %v %d", i+1, got.Count, got.Allowed, got.WindowID, want.count, want.allowed, slice)
				}
				if want.allowed && (got.ResetAfter <= 0 || got.ResetAfter > time.Hour) {
					t.Errorf("hit %d: reset after %v, want within the hour (the slice 23 hours old leaves then)", i+1, got.ResetAfter)
				}
			}
			if ok, _ := b.rdb.HExists(ctx, key, strconv.FormatInt(slice-24, 10)).Result(); ok {
				t.Errorf("the slice 24 hours old is still stored, want it deleted")
			}
			refund := func(tk limit.Take) {
				t.Helper()
				if err := s.Counters.Refund(ctx, []limit.Take{tk}); err != nil {
					t.Fatal(err)
				}
			}
			hit := w
			hit.WindowID = slice
			refund(hit)
			gone := w
			gone.WindowID = slice - 30 // a slice that left the window: nothing created
			refund(gone)
			if n, _ := b.rdb.HGet(ctx, key, strconv.FormatInt(slice, 10)).Int64(); n != 3 {
				t.Errorf("the slice under way after a refund: %d, want 3", n)
			}
			if ok, _ := b.rdb.HExists(ctx, key, strconv.FormatInt(slice-30, 10)).Result(); ok {
				t.Errorf("a refund created a slice")
			}
			ttl, _ := b.rdb.PTTL(ctx, key).Result()
			if ttl <= 23*time.Hour || ttl > 24*time.Hour {
				t.Errorf("TTL %v, want until the slice under way leaves the window (23-24h)", ttl)
			}
			if b.mini == nil {
				return
			}
			b.mini.SetTime(now.Add(time.Hour)) // the slice 23 hours old leaves
			if got := take1(t, s, w); got.Count != 4 || !got.Allowed {
				t.Errorf("an hour later: count %d allowed %v, want 4 true (3 + this hit)", got.Count, got.Allowed)
			}
		})
	}
}

// TestSlidingWindowExactAcrossClients: concurrent hits through two
// clients, each denied hit given back as the OTP send's counting rule
// does (the room's windows refund their own refusal): exactly the limit
// allowed, and the window holds exactly that.
func TestSlidingWindowExactAcrossClients(t *testing.T) {
	tg := redistest.New(t)
	stores := []*store.Redis{store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix), store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix)}
	ctx := context.Background()
	w := sw("exact", 25, 1)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 80 {
		wg.Go(func() {
			s := stores[i%2]
			res, err := s.Counters.Take(ctx, []limit.Take{w})
			if err != nil {
				t.Error(err)
				return
			}
			if res[0].Allowed {
				allowed.Add(1)
				return
			}
			back := w
			back.WindowID = res[0].WindowID
			if err := s.Counters.Refund(ctx, []limit.Take{back}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 25 {
		t.Errorf("allowed %d, want exactly 25", got)
	}
	vals, err := redistest.Client(t, tg.URL).HVals(ctx, tg.Prefix+"lim:t:{exact}:sw").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, v := range vals {
		n, _ := strconv.ParseInt(v, 10, 64)
		sum += n
	}
	if sum != 25 {
		t.Errorf("the window holds %d, want 25", sum)
	}
}
