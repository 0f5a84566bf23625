package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store"
)

// TestSignOuts: a sign-out is kept until the session would have expired,
// on both engines; signing out twice is fine; expired ones are not listed.
func TestSignOuts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *store.SQL) {
		ctx := t.Context()
		now := time.Now()
		if got, err := s.ListRevokedSessions(ctx); err != nil || len(got) != 0 {
			t.Fatalf("fresh store: %v, %v; want none", got, err)
		}
		for _, r := range []struct {
			id    string
			until time.Time
		}{{"live", now.Add(time.Hour)}, {"live", now.Add(2 * time.Hour)}, {"gone", now.Add(-time.Second)}, {"other", now.Add(time.Minute)}} {
			if err := s.RevokeSession(ctx, r.id, r.until); err != nil {
				t.Fatalf("RevokeSession(%s): %v", r.id, err)
			}
		}
		got, err := s.ListRevokedSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if want := []string{"live", "other"}; !slices.Equal(got, want) {
			t.Errorf("revoked sessions %v, want %v", got, want)
		}
	})
}
