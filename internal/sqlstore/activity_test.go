package sqlstore_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

func TestSQLCountActivity(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		at := func(min, sec int) time.Time {
			return base.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second)
		}
		writeEvents(t, s, []guard.Event{
			{At: at(0, 1), Action: "otp.send", Outcome: "sent"},
			{At: at(0, 59), Action: "otp.send", Outcome: "sent"},
			{At: at(0, 30), Action: "otp.send", Outcome: "cooldown"},
			{At: at(1, 0), Action: "otp.send", Outcome: "sent"},
			{At: at(1, 5), Action: "otp.verify", Outcome: "too_many_attempts"},
			{At: at(1, 6), Action: "ops.unblock", Outcome: "unblocked"}, // not counted
			{At: at(2, 0), Action: "otp.send", Outcome: "sent"},         // at until: excluded
			{At: at(-1, 59), Action: "otp.send", Outcome: "sent"},       // before since: excluded
		})
		got, err := s.CountActivity(t.Context(), at(0, 0), at(2, 0))
		if err != nil {
			t.Fatal(err)
		}
		want := []ops.ActivityCount{
			{Minute: at(0, 0), Action: "otp.send", Outcome: "cooldown", N: 1},
			{Minute: at(0, 0), Action: "otp.send", Outcome: "sent", N: 2},
			{Minute: at(1, 0), Action: "otp.send", Outcome: "sent", N: 1},
			{Minute: at(1, 0), Action: "otp.verify", Outcome: "too_many_attempts", N: 1},
		}
		sortCounts := cmp.Transformer("sort", func(in []ops.ActivityCount) map[string]int64 {
			m := map[string]int64{}
			for _, c := range in {
				m[c.Minute.Format(time.RFC3339)+" "+c.Action+" "+c.Outcome] += c.N
			}
			return m
		})
		if diff := cmp.Diff(want, got, sortCounts); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
	})
}
