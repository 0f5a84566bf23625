package sqlstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

func TestSQLDenyList(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		ctx := t.Context()
		now := time.Now().UTC()
		ptr := func(t time.Time) *time.Time { return &t }

		add := func(e guard.DenyEntry) guard.DenyEntry {
			t.Helper()
			got, err := s.AddDeny(ctx, e)
			if err != nil {
				t.Fatalf("AddDeny(%q): %v", e.Pattern, err)
			}
			if got.ID <= 0 {
				t.Fatalf("AddDeny(%q): ID = %d, want > 0", e.Pattern, got.ID)
			}
			return got
		}
		// Sub-millisecond parts are deliberate: the store keeps milliseconds,
		// and AddDeny must return what ListDeny will later read back.
		forever := add(guard.DenyEntry{
			Pattern:   "+919800000000",
			Reason:    "SMS pumping",
			Author:    "alice",
			CreatedAt: now.Add(-time.Minute - 123456*time.Nanosecond),
		})
		temporary := add(guard.DenyEntry{
			Pattern:   "+88213",
			Reason:    "satellite range",
			Author:    "bob",
			ExpiresAt: ptr(now.Add(time.Hour + 987654*time.Nanosecond)),
		})
		expired := add(guard.DenyEntry{
			Pattern:   "+44",
			Reason:    "old incident",
			Author:    "carol",
			CreatedAt: now.Add(-2 * time.Hour),
			ExpiresAt: ptr(now.Add(-time.Hour)),
		})

		if forever.CreatedAt.Nanosecond()%int(time.Millisecond) != 0 {
			t.Errorf("AddDeny returned CreatedAt %v, want it truncated to the millisecond", forever.CreatedAt)
		}
		if temporary.CreatedAt.IsZero() {
			t.Error("AddDeny with zero CreatedAt: returned CreatedAt is zero, want now")
		}
		if d := temporary.CreatedAt.Sub(now); d < -time.Second || d > time.Minute {
			t.Errorf("AddDeny with zero CreatedAt: CreatedAt = %v, want about %v", temporary.CreatedAt, now)
		}
		if !(forever.ID < temporary.ID && temporary.ID < expired.ID) {
			t.Errorf("IDs %d, %d, %d: want increasing", forever.ID, temporary.ID, expired.ID)
		}

		got, err := s.ListDeny(ctx)
		if err != nil {
			t.Fatalf("ListDeny: %v", err)
		}
		if diff := cmp.Diff([]guard.DenyEntry{forever, temporary}, got); diff != "" {
			t.Errorf("ListDeny (-want +got), expired entry must not be listed:\n%s", diff)
		}

		// Removing works on live and expired entries alike.
		for _, e := range []guard.DenyEntry{temporary, expired} {
			if err := s.RemoveDeny(ctx, e.ID); err != nil {
				t.Fatalf("RemoveDeny(%d): %v", e.ID, err)
			}
		}
		got, err = s.ListDeny(ctx)
		if err != nil {
			t.Fatalf("ListDeny after remove: %v", err)
		}
		if diff := cmp.Diff([]guard.DenyEntry{forever}, got); diff != "" {
			t.Errorf("ListDeny after remove (-want +got):\n%s", diff)
		}

		for _, id := range []int64{temporary.ID, 987654321, 0, -1} {
			if err := s.RemoveDeny(ctx, id); !errors.Is(err, guard.ErrNotFound) {
				t.Errorf("RemoveDeny(%d) of a missing entry = %v, want guard.ErrNotFound", id, err)
			}
		}
	})
}

func TestSQLDenyListEmpty(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		got, err := s.ListDeny(t.Context())
		if err != nil {
			t.Fatalf("ListDeny: %v", err)
		}
		if got == nil || len(got) != 0 {
			t.Errorf("ListDeny on an empty table = %#v, want an empty, non-nil slice", got)
		}
	})
}

func TestSQLAddDenyRejects(t *testing.T) {
	now := time.Now()
	before := now.Add(-time.Hour)
	tests := []struct {
		name  string
		entry guard.DenyEntry
	}{
		{"empty pattern", guard.DenyEntry{}},
		{"no plus", guard.DenyEntry{Pattern: "919800000000"}},
		{"letters", guard.DenyEntry{Pattern: "+91abc"}},
		{"too long", guard.DenyEntry{Pattern: "+1234567890123456"}},
		{"expires before created", guard.DenyEntry{Pattern: "+44", CreatedAt: now, ExpiresAt: &before}},
	}
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.AddDeny(t.Context(), tt.entry)
				if got := problem.CodeOf(err); got != problem.CodeInvalidRequest {
					t.Errorf("AddDeny: error %v, code %q, want %q", err, got, problem.CodeInvalidRequest)
				}
			})
		}
		got, err := s.ListDeny(t.Context())
		if err != nil {
			t.Fatalf("ListDeny: %v", err)
		}
		if len(got) != 0 {
			t.Errorf("ListDeny after rejected adds = %v, want none", got)
		}
	})
}

// TestSQLAddDenyErrorMasksPattern: a failed add names its pattern, often a
// whole number, and the error reaches a log: the number must be masked.
func TestSQLAddDenyErrorMasksPattern(t *testing.T) {
	const phone = "+919800000000"
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // the insert fails before it reaches the database
		_, err := s.AddDeny(ctx, guard.DenyEntry{Pattern: phone, Reason: "SMS pumping", Author: "alice"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("AddDeny with a cancelled context: %v, want context.Canceled", err)
		}
		if got := err.Error(); strings.Contains(got, strings.TrimPrefix(phone, "+")) {
			t.Errorf("AddDeny error %q holds the full number %s", got, phone)
		}
		if got, want := err.Error(), guard.MaskPhone(phone); !strings.Contains(got, want) {
			t.Errorf("AddDeny error %q, want the masked pattern %s in it", got, want)
		}
	})
}
