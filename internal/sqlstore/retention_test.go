package sqlstore_test

import (
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestSQLPruneExpiredDeny: retention deletes the deny-list entries that
// expired before the horizon, and only those.
func TestSQLPruneExpiredDeny(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		ctx := t.Context()
		now := time.Now().UTC()
		add := func(pattern string, expiresIn time.Duration) {
			t.Helper()
			e := guard.DenyEntry{Pattern: pattern, CreatedAt: now.Add(-72 * time.Hour)}
			if expiresIn != 0 {
				at := now.Add(expiresIn)
				e.ExpiresAt = &at
			}
			if _, err := s.AddDeny(ctx, e); err != nil {
				t.Fatalf("AddDeny(%s): %v", pattern, err)
			}
		}
		add("+1415", 0)             // never expires
		add("+1416", -48*time.Hour) // expired long ago
		add("+1417", -time.Hour)    // expired lately
		add("+1418", 24*time.Hour)  // live

		prune := func(before time.Time, want int64) {
			t.Helper()
			n, err := s.PruneExpiredDeny(ctx, before)
			if err != nil || n != want {
				t.Fatalf("PruneExpiredDeny(%v) = %d, %v; want %d", before, n, err, want)
			}
		}
		prune(now.Add(-24*time.Hour), 1) // +1416 only
		prune(now.Add(-24*time.Hour), 0)
		prune(now, 1) // +1417
		live, err := s.ListDeny(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var patterns []string
		for _, e := range live {
			patterns = append(patterns, e.Pattern)
		}
		if len(patterns) != 2 || patterns[0] != "+1415" || patterns[1] != "+1418" {
			t.Errorf("after pruning the deny-list is %v, want [+1415 +1418]", patterns)
		}
	})
}
