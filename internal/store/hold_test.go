package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
)

const holdFor = 72 * time.Hour

// holdMark is a verify's mark of country KE at now, held for holdFor when
// its hour is abnormal above max(2, 2 x baseline).
func holdMark(name string, now time.Time, sentTrusted bool) guard.TrustMark {
	return guard.TrustMark{Key: limit.Key{Space: "otp:tr", ID: "KE", Name: name},
		Tier: limit.Key{Space: "otp:vel", ID: "KE", Name: "t"}, Hour: now.Unix() / 3600, Credit: true,
		SentTrusted: sentTrusted, TTL: 26 * time.Hour, Now: now,
		Hold: holdFor, Volume: limit.Key{Space: "otp:vel", ID: "KE", Name: "h"}, Floor: 2, Factor: 2}
}

// TestHeldTrustMark drives marks through a country's hours: a verify in a
// normal hour is trusted at once; in an hour whose new numbers ran above
// max(floor, 2 x baseline) its mark is held (not trusted, its verify not
// the trusted tier's) until holdFor later and lives that much longer; a
// held mark's re-verify keeps its time; a mark that counted keeps
// counting; an import and an account's verify are never held, and the
// account's lifts a hold; the hour after an abnormal one is judged by it
// too; with no hold nothing is held.
func TestHeldTrustMark(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			h := time.Now().Unix() / 3600
			now := time.Unix(h*3600+600, 0)
			send := func(at time.Time, n int) { // n new numbers' sends, each verified
				t.Helper()
				for range n {
					v := paceVolume(at, 2, 2)
					r, err := s.Velocity.TakeVolume(ctx, v)
					if err != nil || !r.Allowed {
						t.Fatalf("send: %+v, %v", r, err)
					}
					if err := s.Velocity.CountVerified(ctx, v.Key, limit.Key{}, v.Hour, time.Hour); err != nil {
						t.Fatal(err)
					}
				}
			}
			mark := func(m guard.TrustMark, wantCredited, wantHeld int) {
				t.Helper()
				got, err := s.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{m}, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if got.Trusted != wantCredited || got.Held != wantHeld {
					t.Errorf("mark %s: %+v, want credited %d held %d", m.Key.Name, got, wantCredited, wantHeld)
				}
			}
			trusted := func(n string, at time.Time, want bool) {
				t.Helper()
				ok, err := s.TrustMarks.Trusted(ctx, limit.Key{Space: "otp:tr", ID: "KE", Name: n}, at)
				if err != nil || ok != want {
					t.Errorf("Trusted(%s) at +%s: %v, %v, want %v", n, at.Sub(now), ok, err, want)
				}
			}
			send(now, 1) // 1 send: within max(2, 2 x 0)
			mark(holdMark("normal", now, false), 0, 0)
			trusted("normal", now, true)
			send(now, 3) // 4 sends: above 2
			mark(holdMark("bulk", now, false), 0, 1)
			trusted("bulk", now, false)
			trusted("bulk", now.Add(holdFor-time.Second), false)
			trusted("bulk", now.Add(holdFor), true)
			if ttl := b.rdb.PTTL(ctx, b.prefix+"otp:tr:{KE}:bulk").Val(); ttl < holdFor+59*time.Minute || ttl > holdFor+time.Hour {
				t.Errorf("held mark's TTL %s, want the hold and the mark's hour", ttl)
			}
			before := b.rdb.Get(ctx, b.prefix+"otp:tr:{KE}:bulk").Val()
			mark(holdMark("bulk", now.Add(time.Minute), false), 0, 0) // still held, not longer, not credited
			if after := b.rdb.Get(ctx, b.prefix+"otp:tr:{KE}:bulk").Val(); after != before {
				t.Errorf("a held mark's re-verify moved its time from %s to %s", before, after)
			}
			mark(holdMark("normal", now, false), 1, 0) // trusted before: credited, not held
			trusted("normal", now, true)
			if _, err := s.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{{Key: limit.Key{Space: "otp:tr", ID: "KE", Name: "import"}}}, time.Hour); err != nil {
				t.Fatal(err)
			}
			trusted("import", now, true)
			mark(holdMark("account", now, true), 1, 0)
			trusted("account", now, true)
			mark(holdMark("bulk", now, true), 1, 0) // an account's verify lifts the hold (and is the trusted tier's)
			trusted("bulk", now, true)
			off := holdMark("off", now, false)
			off.Hold = 0
			mark(off, 0, 0)
			trusted("off", now, true)

			// The hour after: 12 sends in hour h (the pace's most: 3 x 2 x
			// 2), a baseline capped at 4 in h+1, so h ran above 2 x 4.
			send(now, 8)
			next := now.Add(time.Hour)
			send(next, 1)
			mark(holdMark("after", next, false), 0, 1)
			trusted("after", next, false)
		})
	}
}

// TestMarkReadersAgree: every reader of a mark, at two clocks, says the
// same of each state: absent, counting, held (until an hour on). The
// readers: TrustMarks.Trusted (read_trust_mark), the velocity script
// (take_volume: which tier counts the send), the automatic windows of the
// send's MULTI (take_automatic: counted or skipped), and on Cluster the
// send's read first (clusterTrust).
func TestMarkReadersAgree(t *testing.T) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	states := []struct {
		name  string
		value string // "": no mark
		at    time.Time
		want  bool
	}{
		{"absent", "", now, false},
		{"counts", "1", now, true},
		{"held", itoa(now.Add(time.Hour).Unix()), now, false},
		{"held, read after its time", itoa(now.Add(time.Hour).Unix()), now.Add(2 * time.Hour), true},
		{"held until now", itoa(now.Unix()), now, true},
	}
	type reader struct {
		name string
		read func(t *testing.T, s *store.Redis, mark limit.Key, at time.Time) bool
	}
	auto := limit.Take{Key: limit.Key{Space: "otp:prefix", ID: "+2547", Name: "sends"}, Algorithm: limit.FixedWindow,
		Limit: 1000, Window: time.Minute, Cost: 1, Automatic: true}
	readers := []reader{
		{"Trusted", func(t *testing.T, s *store.Redis, mark limit.Key, at time.Time) bool {
			ok, err := s.TrustMarks.Trusted(ctx, mark, at)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}},
		{"take_volume", func(t *testing.T, s *store.Redis, mark limit.Key, at time.Time) bool {
			v := paceVolume(at, 50, 2)
			v.Mark = mark
			r, err := s.Velocity.TakeVolume(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			return r.Trusted
		}},
		{"send", func(t *testing.T, s *store.Redis, mark limit.Key, at time.Time) bool {
			v := paceVolume(at, 50, 2)
			v.Mark = mark
			res, vr, err := s.Counters.TakeSend(ctx, []limit.Take{auto}, &v)
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Spent == vr.Trusted {
				t.Errorf("the automatic window spent %v, the volume trusted %v: they disagree", res[0].Spent, vr.Trusted)
			}
			return vr.Trusted && !res[0].Spent
		}},
	}
	type server struct {
		s      *store.Redis
		set    func(key, value string)
		prefix string
	}
	servers := map[string]func(t *testing.T) server{}
	for name, mk := range backends(t) {
		servers[name] = func(t *testing.T) server {
			b := mk(t)
			return server{store.NewRedis(b.rdb, b.prefix), func(k, v string) { b.rdb.Set(ctx, k, v, time.Hour) }, b.prefix}
		}
	}
	servers["cluster"] = func(t *testing.T) server {
		st, rdb, _, prefix := clusterStore(t)
		return server{st, func(k, v string) { rdb.Set(ctx, k, v, time.Hour) }, prefix}
	}
	for name, mk := range servers {
		t.Run(name, func(t *testing.T) {
			srv := mk(t)
			for i, st := range states {
				mark := limit.Key{Space: "otp:tr", ID: "KE", Name: "s" + itoa(int64(i))}
				if st.value != "" {
					srv.set(srv.prefix+"otp:tr:{KE}:"+mark.Name, st.value)
				}
				for _, r := range readers {
					if got := r.read(t, srv.s, mark, st.at); got != st.want {
						t.Errorf("%s: %s reads trusted %v, want %v", st.name, r.name, got, st.want)
					}
				}
			}
		})
	}
}

// TestHeldTrustMarkProRata: an hour is judged at the verify's minute by
// the share of its line gone (at least the floor), so the same count of
// new numbers holds a mark early in its hour and not late in it; the hour
// before is judged by its whole line.
func TestHeldTrustMarkProRata(t *testing.T) {
	const base, factor, floor = 30, 2, 2 // the whole line: 60 new numbers
	cases := []struct {
		name          string
		minute        int64 // of the verify's hour
		sends, before int   // new numbers sent in the hour so far, and in the hour before
		held          bool
	}{
		{"a quarter gone, above its quarter", 15, 20, 0, true},
		{"a quarter gone, at its quarter", 15, 15, 0, false},
		{"three quarters gone, the same count", 45, 20, 0, false},
		{"the hour's first minute, within the floor", 0, 2, 0, false},
		{"the hour's first minute, above the floor", 0, 3, 0, true},
		{"the hour before within its whole line", 30, 1, 60, false},
		{"the hour before above its whole line", 30, 1, 61, true},
	}
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			h := time.Now().Unix()/3600 - 10
			for i, c := range cases {
				hr := h + int64(2*i) // an hour and the one before each, apart from the others'
				b.rdb.HSet(ctx, b.prefix+"otp:vel:{KE}:h", "b:"+itoa(hr), base, "s:"+itoa(hr), c.sends, "s:"+itoa(hr-1), c.before)
				now := time.Unix(hr*3600+c.minute*60, 0)
				m := holdMark("pr"+itoa(int64(i)), now, false)
				m.Floor, m.Factor = floor, factor
				got, err := s.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{m}, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if want := map[bool]int{true: 1}[c.held]; got.Held != want {
					t.Errorf("%s: held %d, want %d", c.name, got.Held, want)
				}
				ok, err := s.TrustMarks.Trusted(ctx, m.Key, now)
				if err != nil || ok == c.held {
					t.Errorf("%s: trusted %v, %v, want %v", c.name, ok, err, !c.held)
				}
			}
			b.rdb.Del(ctx, b.prefix+"otp:vel:{KE}:h")
		})
	}
}

// TestHeldTrustMarkByCarrier: with a carrier floor share, a mark's hour is
// judged by its carrier's counts (KEYS[4]) against its part of each line,
// carrier_room(share, line): the share cached for the hour, or the hour
// before's; at least the carrier floor (a tenth of 20: 2). A farm's
// carrier above its part is held where the country is too; another
// carrier within its part in the same hour is not; a share of 1000 or
// none cached, or no floor share (no split), leaves the country to judge.
func TestHeldTrustMarkByCarrier(t *testing.T) {
	const base, factor, floor = 100, 2, 20 // the whole line 200; at :30, 100
	cases := []struct {
		name                string
		floorShare          float64
		country, before     int    // the country's new numbers this hour and the hour before
		carrier, carrierBef int    // the carrier's
		share, shareBefore  string // "p:<hour>" and "p:<hour-1>", "": none cached
		held, byCarrier     bool
	}{
		{"the farm's carrier above its part", 0.1, 150, 0, 60, 0, "100", "", true, true},
		{"another carrier within its part, the same hour", 0.1, 150, 0, 40, 0, "800", "", false, true},
		{"the farm's carrier within its part", 0.1, 150, 0, 10, 0, "100", "", false, true},
		{"without the split: the country", 0, 150, 0, 40, 0, "800", "", true, false},
		{"a share of 1000: the country", 0.1, 150, 0, 10, 0, "1000", "", true, false},
		{"no share cached: the country", 0.1, 150, 0, 0, 0, "", "", true, false},
		{"the hour before above its whole part", 0.1, 0, 21, 0, 21, "", "100", true, true},
		{"the hour before within its whole part", 0.1, 0, 21, 0, 20, "", "100", false, true},
		{"no share: above the carrier floor", 0.1, 3, 0, 3, 0, "0", "", true, true},
		{"no share: within the carrier floor", 0.1, 3, 0, 2, 0, "0", "", false, true},
	}
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			h := time.Now().Unix()/3600 - 30
			for i, c := range cases {
				hr := h + int64(2*i)
				b.rdb.HSet(ctx, b.prefix+"otp:vel:{KE}:h", "b:"+itoa(hr), base, "s:"+itoa(hr), c.country, "s:"+itoa(hr-1), c.before)
				ck := limit.Key{Space: "otp:vel", ID: "KE", Name: "c:x" + itoa(int64(i))}
				b.rdb.HSet(ctx, b.prefix+"otp:vel:{KE}:"+ck.Name, "s:"+itoa(hr), c.carrier, "s:"+itoa(hr-1), c.carrierBef)
				if c.share != "" {
					b.rdb.HSet(ctx, b.prefix+"otp:vel:{KE}:"+ck.Name, "p:"+itoa(hr), c.share)
				}
				if c.shareBefore != "" {
					b.rdb.HSet(ctx, b.prefix+"otp:vel:{KE}:"+ck.Name, "p:"+itoa(hr-1), c.shareBefore)
				}
				now := time.Unix(hr*3600+30*60, 0)
				m := holdMark("ca"+itoa(int64(i)), now, false)
				m.Floor, m.Factor, m.Carrier, m.CarrierFloorShare = floor, factor, ck, c.floorShare
				got, err := s.TrustMarks.MarkTrusted(ctx, []guard.TrustMark{m}, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				want := guard.Marked{Held: map[bool]int{true: 1}[c.held], ByCarrier: map[bool]int{true: 1}[c.byCarrier]}
				if got != want {
					t.Errorf("%s: %+v, want %+v", c.name, got, want)
				}
				ok, err := s.TrustMarks.Trusted(ctx, m.Key, now)
				if err != nil || ok == c.held {
					t.Errorf("%s: trusted %v, %v, want %v", c.name, ok, err, !c.held)
				}
				b.rdb.Del(ctx, b.prefix+"otp:vel:{KE}:"+ck.Name)
			}
			b.rdb.Del(ctx, b.prefix+"otp:vel:{KE}:h")
		})
	}
}
