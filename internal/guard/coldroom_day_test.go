package guard_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestColdRoomDaySlides: the room's day is the last 24 hours of Redis's
// clock, not a window from its first send: sends counted 23 hours ago
// still fill it (the day's refusal), those of 24 hours ago no longer.
func TestColdRoomDaySlides(t *testing.T) {
	for _, tc := range []struct {
		name string
		ago  int64 // hours before the slice under way
		sent int   // of 10 cold sends
	}{
		{"23 hours ago", 23, 5},
		{"24 hours ago", 24, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newColdFleet(t, 2, 30, 150, nil, nil)
			ctx := context.Background()
			now, err := f.rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			slice := now.UnixMilli() / time.Hour.Milliseconds()
			day := strings.TrimSuffix(f.roomKey, "hour") + "day:hours"
			if err := f.rdb.HSet(ctx, day, strconv.FormatInt(slice-tc.ago, 10), 145).Err(); err != nil {
				t.Fatal(err)
			}
			if err := f.rdb.Expire(ctx, day, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			sent := 0
			for n := range 10 {
				switch err := f.send(n%2, mobileOf(t, "FR", n), n, false); problem.CodeOf(err) {
				case "":
					sent++
				case problem.CodeUnusualVolume:
				default:
					t.Fatalf("send %d: %v", n+1, err)
				}
			}
			if sent != tc.sent {
				t.Errorf("cold sends: %d of 10, want %d", sent, tc.sent)
			}
		})
	}
}

// TestColdRoomWarmth: what warms a country, read from the velocity
// script's reply (a send of an instance with no reading takes the room,
// and gives it back when the reply shows the country warm): cold_below
// verified sends in an hour that ended a day ago or more, in the new
// numbers' tier (when the day-old hours hold history_min_sends sends, at
// least cold_warm_conversion of them verified) or the trusted tier (the
// app's account flag), or cold_below numbers an operator imported; not
// the same verified sends an hour ago (a ring verifying its own codes, or
// farming trust, within the day), nor fewer imports, nor day-old hours
// too few or too little verified (a ring verifying 70 % in the room).
func TestColdRoomWarmth(t *testing.T) {
	const dayAgo, hourAgo, below = warmHistoryAgo, 3600, guard.DefaultColdBelow
	// dayOld is a day-old hour of below sends, each verified, and hours
	// of below sends before it, verified of each verified, up to
	// history_min_sends sends: its warmth is below either way.
	dayOld := func(verified int) func(*coldFleet) {
		return func(f *coldFleet) {
			f.historyAt(t, "DE", below, below, dayAgo, false, 900)
			f.padHistory(t, "DE", below, verified)
		}
	}
	for _, tc := range []struct {
		name     string
		history  func(f *coldFleet)
		wantRoom int64 // the room's count after one send to DE: 0 warm, 1 cold
	}{
		{"no history", func(*coldFleet) {}, 1},
		{"verified a day ago", func(f *coldFleet) { f.warmUp(t, "DE", below) }, 0},
		{"verified a day ago, 81 % of the day-old sends", dayOld(below * 8 / 10), 0},
		{"verified a day ago, 72 % of the day-old sends", dayOld(below * 7 / 10), 1},
		{"verified a day ago, too few sends in all", func(f *coldFleet) { f.historyAt(t, "DE", below, below, dayAgo, false, 900) }, 1},
		{"verified an hour ago", func(f *coldFleet) {
			f.historyAt(t, "DE", below, below, hourAgo, false, 900)
			f.padHistory(t, "DE", below, below)
		}, 1},
		{"verified a day ago, too few", func(f *coldFleet) { f.warmUp(t, "DE", below-1) }, 1},
		{"trusted tier a day ago", func(f *coldFleet) { f.historyAt(t, "DE", below, below, dayAgo, true, 900) }, 0},
		{"trusted tier an hour ago", func(f *coldFleet) { f.historyAt(t, "DE", below, below, hourAgo, true, 900) }, 1},
		{"imported", func(f *coldFleet) { f.imported(t, "DE", below) }, 0},
		{"imported, too few", func(f *coldFleet) { f.imported(t, "DE", below-1) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newColdFleetOn(t, 1, 30, 150, nil, nil, false)
			tc.history(f)
			if err := f.send(0, mobileOf(t, "DE", 1), 1, false); err != nil {
				t.Fatal(err)
			}
			if got := f.room(t); got != tc.wantRoom {
				t.Errorf("the room after a send to DE: %d, want %d (%s)", got, tc.wantRoom, map[int64]string{0: "warm", 1: "cold"}[tc.wantRoom])
			}
		})
	}
}

// imported has an operator import n numbers of region, now.
func (f *coldFleet) imported(t *testing.T, region string, n int) {
	t.Helper()
	numbers := make([]string, n)
	for k := range numbers {
		numbers[k] = mobileOf(t, region, 700+k)
	}
	res, err := f.history.ImportTrusted(context.Background(), numbers, "test")
	if err != nil || res.Imported != n {
		t.Fatalf("import: %+v %v, want %d imported", res, err, n)
	}
}
