package sqlstore_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

func TestSQLCountByService(t *testing.T) {
	const shop, bank = "VA0123456789abcdef0123456789abcdef", "VAfedcba9876543210fedcba9876543210"
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		until := since.Add(24 * time.Hour)
		in := func(h int) time.Time { return since.Add(time.Duration(h) * time.Hour) }
		writeEvents(t, s, []guard.Event{
			{At: in(0), Action: "otp.send", Outcome: "sent", Service: shop},
			{At: in(1), Action: "otp.send", Outcome: "sent", Service: shop},
			{At: in(2), Action: "otp.send", Outcome: "sent", Service: shop},
			{At: in(3), Action: "otp.verify", Outcome: "valid", Service: shop},
			{At: in(4), Action: "otp.verify", Outcome: "invalid_code", Service: shop}, // a wrong code: not verified
			{At: in(5), Action: "otp.send", Outcome: "cooldown", Service: shop},       // refused: not a send
			{At: in(6), Action: "otp.send", Outcome: "sent", Service: bank},
			{At: in(7), Action: "otp.approve", Outcome: "approved", Service: bank}, // not a check
			{At: in(8), Action: "otp.send", Outcome: "sent"},                       // the default service
			{At: in(9), Action: "otp.verify", Outcome: "valid"},
			{At: in(10), Action: "otp.verify", Outcome: "valid"},
			{At: until, Action: "otp.send", Outcome: "sent", Service: bank},                        // at until: excluded
			{At: since.Add(-time.Millisecond), Action: "otp.send", Outcome: "sent", Service: bank}, // before since: excluded
		})
		got, err := s.CountByService(t.Context(), since, until)
		if err != nil {
			t.Fatal(err)
		}
		want := []ops.ServiceCount{
			{Service: "", Sends: 1, Verified: 2},
			{Service: shop, Sends: 3, Verified: 1},
			{Service: bank, Sends: 1},
		}
		bySID := cmp.Transformer("bySID", func(in []ops.ServiceCount) map[string]ops.ServiceCount {
			m := map[string]ops.ServiceCount{}
			for _, c := range in {
				m[c.Service] = c
			}
			return m
		})
		if diff := cmp.Diff(want, got, bySID); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
		if len(got) != len(want) {
			t.Errorf("got %d rows, want one per service: %+v", len(got), got)
		}
	})
}
