package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func listPhones(t *testing.T, s *store.Redis, match func(string) bool, n int) ([]string, int) {
	t.Helper()
	blocks, total, err := s.Blocks.ListBlocks(context.Background(), match, n)
	if err != nil {
		t.Fatalf("ListBlocks: %v", err)
	}
	var phones []string
	for _, b := range blocks {
		phones = append(phones, b.Phone)
	}
	return phones, total
}

func TestBlockIndex(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			now := time.Now()
			note := func(phone, country string, reason problem.Code, count int64, d time.Duration) {
				t.Helper()
				err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: phone, Country: country, Reason: reason, Count: count, Until: now.Add(d)})
				if err != nil {
					t.Fatalf("NoteBlock(%s): %v", phone, err)
				}
				time.Sleep(3 * time.Millisecond) // distinct start times
			}
			note("+919800000001", "IN", problem.CodePhoneRateLimited, 4, time.Hour)
			note("+14155550100", "US", problem.CodeCooldown, 2, time.Minute)
			note("+919800000002", "IN", problem.CodeTooManyAttempts, 5, 10*time.Minute)

			phones, total := listPhones(t, s, nil, 10)
			if diff := cmp.Diff([]string{"+919800000002", "+14155550100", "+919800000001"}, phones); diff != "" || total != 3 {
				t.Errorf("most recent first (-want +got):\n%s; total %d, want 3", diff, total)
			}
			phones, total = listPhones(t, s, nil, 2)
			if len(phones) != 2 || total != 3 {
				t.Errorf("first 2: %v of %d, want 2 of 3", phones, total)
			}
			inIndia := func(p string) bool { return strings.HasPrefix(p, "+91") }
			phones, total = listPhones(t, s, inIndia, 1)
			if diff := cmp.Diff([]string{"+919800000002"}, phones); diff != "" || total != 2 {
				t.Errorf("filtered, first 1 (-want +got):\n%s; total %d, want 2", diff, total)
			}

			blocks, _, _ := s.Blocks.ListBlocks(ctx, func(p string) bool { return p == "+919800000001" }, 1)
			want := ops.BlockedNumber{Block: guard.Block{Phone: "+919800000001", Country: "IN", Reason: problem.CodePhoneRateLimited,
				Count: 4, Until: now.Add(time.Hour).Truncate(time.Millisecond).UTC()}}
			if len(blocks) != 1 {
				t.Fatalf("got %d blocks, want 1", len(blocks))
			}
			got := blocks[0]
			// Since is Redis TIME, in milliseconds, taken while it was noted.
			if got.Since.Before(now.Truncate(time.Millisecond)) || got.Since.After(time.Now()) {
				t.Errorf("since %s, want between %s (before it was noted) and now", got.Since, now)
			}
			got.Since = time.Time{}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("block (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBlockIndexLongerBlockStands: a short block (a cooldown) noted while a
// longer one (the hour's limit) is in force must not hide it, and a block
// continuing keeps the time it began.
func TestBlockIndexLongerBlockStands(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			now := time.Now()
			const phone = "+919800000001"
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: phone, Reason: problem.CodePhoneRateLimited, Count: 4, Until: now.Add(time.Hour)}); err != nil {
				t.Error(err)
			}
			first, _, _ := s.Blocks.ListBlocks(ctx, nil, 1)
			time.Sleep(5 * time.Millisecond)
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: phone, Reason: problem.CodeCooldown, Count: 2, Until: now.Add(30 * time.Second)}); err != nil {
				t.Error(err)
			}
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: phone, Reason: problem.CodePhoneRateLimited, Count: 5, Until: now.Add(time.Hour + time.Second)}); err != nil {
				t.Error(err)
			}
			blocks, total, err := s.Blocks.ListBlocks(ctx, nil, 10)
			if err != nil || total != 1 || len(blocks) != 1 {
				t.Fatalf("got %v of %d (%v), want one block", blocks, total, err)
			}
			if blocks[0].Reason != problem.CodePhoneRateLimited || blocks[0].Count != 5 {
				t.Errorf("block: %s count %d, want phone_rate_limited count 5", blocks[0].Reason, blocks[0].Count)
			}
			if !blocks[0].Since.Equal(first[0].Since) {
				t.Errorf("since moved from %s to %s while the block went on", first[0].Since, blocks[0].Since)
			}
		})
	}
}

func TestBlockIndexPrunesEndedBlocks(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			short := time.Now().Add(150 * time.Millisecond)
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: "+14155550100", Reason: problem.CodeCooldown, Count: 2, Until: short}); err != nil {
				t.Error(err)
			}
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: "+14155550101", Reason: problem.CodeCooldown, Count: 2, Until: time.Now().Add(time.Hour)}); err != nil {
				t.Error(err)
			}
			// A block that has already ended is not noted at all.
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: "+14155550102", Reason: problem.CodeCooldown, Count: 2, Until: time.Now().Add(-time.Second)}); err != nil {
				t.Error(err)
			}
			// Both live blocks are listed while the short one lasts (on a
			// machine too busy to look within its 150ms, it has rightly
			// gone, and only the wait below tells).
			if _, total := listPhones(t, s, nil, 10); total > 2 || (total != 2 && time.Now().Before(short)) {
				t.Fatalf("total %d, want 2", total)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				phones, total := listPhones(t, s, nil, 10)
				if total == 1 && len(phones) == 1 && phones[0] == "+14155550101" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("ended block still listed: %v (total %d)", phones, total)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Every index key expires: none lives without a TTL.
			keys, err := b.rdb.Keys(ctx, b.prefix+"ops:*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if !strings.Contains(k, "ops:{blocks}:") {
					t.Errorf("key %s lacks the {blocks} hash tag", k)
				}
				if ttl := b.rdb.PTTL(ctx, k).Val(); ttl <= 0 {
					t.Errorf("key %s has no TTL (%s)", k, ttl)
				}
			}
		})
	}
}

// The services of TestUnblock.
const (
	unblockSvcA = "VA00000000000000000000000000000001"
	unblockSvcB = "VA00000000000000000000000000000002"
)

func TestUnblock(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			const phone = "+919800000001"
			cooldown := fw(phone, 1, time.Minute, 1)
			cooldown.Key = limit.Key{Space: "otp", ID: phone, Name: "cooldown"}
			sends := fw(phone, 3, time.Hour, 1)
			sends.Key = limit.Key{Space: "otp", ID: phone, Name: "sends"}
			ip := fw("203.0.113.7", 10, time.Hour, 1)
			ip.Key = limit.Key{Space: "otp:ip", ID: "203.0.113.7", Name: "sends"}
			for _, tk := range []limit.Take{cooldown, sends, ip, cooldown} {
				take1(t, s, tk)
			}
			if _, err := s.Codes.SaveCode(ctx, newCode(phone, []byte("mac"))); err != nil {
				t.Error(err)
			}
			// Two named services' codes of the number: the unblock names
			// one, whose code goes; the other's stays.
			for _, svc := range []string{unblockSvcA, unblockSvcB} {
				c := newCode(phone, []byte("mac-"+svc))
				c.Service = svc
				if _, err := s.Codes.SaveCode(ctx, c); err != nil {
					t.Error(err)
				}
			}
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: phone, Reason: problem.CodeCooldown, Count: 2, Until: time.Now().Add(time.Minute)}); err != nil {
				t.Error(err)
			}
			if err := s.Blocks.NoteBlock(ctx, guard.Block{Phone: "+919800000002", Reason: problem.CodeCooldown, Count: 2, Until: time.Now().Add(time.Minute)}); err != nil {
				t.Error(err)
			}

			if err := s.Blocks.Unblock(ctx, phone, []limit.Key{cooldown.Key, sends.Key}, unblockSvcA); err != nil {
				t.Fatal(err)
			}
			if r := take1(t, s, cooldown); !r.Allowed || r.Count != 1 {
				t.Errorf("cooldown after unblock: %+v, want a fresh window", r)
			}
			if r := take1(t, s, sends); r.Count != 1 {
				t.Errorf("sends after unblock: count %d, want 1", r.Count)
			}
			if r := take1(t, s, ip); r.Count != 2 {
				t.Errorf("per-IP counter after unblock: count %d, want 2 (not the number's)", r.Count)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, time.Now()); err != guard.ErrNotFound {
				t.Errorf("code after unblock: %v, want ErrNotFound", err)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: unblockSvcA}, time.Now()); err != guard.ErrNotFound {
				t.Errorf("the named service's code after unblock: %v, want ErrNotFound", err)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: unblockSvcB}, time.Now()); err != nil {
				t.Errorf("another service's code after unblock: %v, want it kept", err)
			}
			if phones, total := listPhones(t, s, nil, 10); total != 1 || phones[0] != "+919800000002" {
				t.Errorf("index after unblock: %v (total %d), want only the other number", phones, total)
			}
		})
	}
}

// TestNoteBlockRefundVolume: a refused send's block note and velocity
// refund go out in one round trip, and each takes effect: the block is
// listed and the country's hour has room for one more send. After the
// server lost its script cache, again.
func TestNoteBlockRefundVolume(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			if err := s.LoadScripts(ctx); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			vol := sendVolume(now, 2)
			for round, phone := range []string{"+447400123401", "+447400123402"} {
				if round == 1 && b.mini != nil { // a private server: its script cache may go
					if err := b.rdb.ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				for { // the hour's floor is spent
					r, err := s.Velocity.TakeVolume(ctx, *vol)
					if err != nil {
						t.Fatal(err)
					}
					if !r.Allowed {
						break
					}
				}
				rt := &redistest.RoundTrips{}
				b.rdb.AddHook(rt)
				err := s.Blocks.NoteBlockRefundVolume(ctx, guard.Block{Phone: phone, Country: "GB", Reason: problem.CodeCooldown, Count: 1, Until: now.Add(time.Minute)},
					vol.Key, limit.Key{}, now)
				if err != nil {
					t.Fatal(err)
				}
				if round == 0 && rt.N() != 1 {
					t.Errorf("%d round trips, want 1", rt.N())
				}
				if phones, _ := listPhones(t, s, func(p string) bool { return p == phone }, 10); len(phones) != 1 {
					t.Errorf("round %d: block of %s not listed: %v", round, phone, phones)
				}
				if r, err := s.Velocity.TakeVolume(ctx, *vol); err != nil || !r.Allowed {
					t.Errorf("round %d: after the refund: %+v %v, want allowed", round, r, err)
				}
			}
		})
	}
}
