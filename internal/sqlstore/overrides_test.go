package sqlstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

func TestSQLOverrides(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		ctx := t.Context()
		now := time.Date(2026, 12, 2, 19, 0, 0, 123456789, time.UTC)
		add := func(o guard.Override) guard.Override {
			t.Helper()
			got, err := s.AddOverride(ctx, o)
			if err != nil {
				t.Fatalf("AddOverride(%s %s): %v", o.Kind, o.Subject, err)
			}
			if got.ID <= 0 {
				t.Fatalf("AddOverride: ID = %d, want > 0", got.ID)
			}
			return got
		}
		pause := add(guard.Override{Kind: guard.OverrideCountryPause, Subject: "NG", Reason: "pumping wave", Author: "alice",
			CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
		prefix := add(guard.Override{Kind: guard.OverridePrefixLimit, Subject: "+2348031", Limit: 5, Reason: "range", Author: "bob",
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
		budget := add(guard.Override{Kind: guard.OverrideBudgetHour, Limit: 100, Reason: "spend", Author: "bob",
			CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)})
		if pause.CreatedAt.Nanosecond()%int(time.Millisecond) != 0 {
			t.Errorf("AddOverride returned CreatedAt %v, want it truncated to the millisecond", pause.CreatedAt)
		}

		got, err := s.ListOverrides(ctx, now)
		if err != nil {
			t.Fatalf("ListOverrides: %v", err)
		}
		if diff := cmp.Diff([]guard.Override{pause, prefix}, got); diff != "" {
			t.Errorf("ListOverrides (-want +got), the expired one must not be listed:\n%s", diff)
		}
		// By the clock the caller gives: an hour later the prefix one has expired.
		got, err = s.ListOverrides(ctx, now.Add(time.Hour))
		if err != nil {
			t.Fatalf("ListOverrides: %v", err)
		}
		if diff := cmp.Diff([]guard.Override{pause}, got); diff != "" {
			t.Errorf("ListOverrides an hour later (-want +got):\n%s", diff)
		}

		removed, err := s.RemoveOverride(ctx, pause.ID)
		if err != nil {
			t.Fatalf("RemoveOverride: %v", err)
		}
		if diff := cmp.Diff(pause, removed); diff != "" {
			t.Errorf("RemoveOverride returned (-want +got):\n%s", diff)
		}
		if _, err := s.RemoveOverride(ctx, budget.ID); err != nil { // expired: still removable
			t.Errorf("RemoveOverride(expired): %v", err)
		}
		if _, err := s.RemoveOverride(ctx, pause.ID); !errors.Is(err, guard.ErrNotFound) {
			t.Errorf("RemoveOverride twice: err = %v, want ErrNotFound", err)
		}
		got, err = s.ListOverrides(ctx, now)
		if err != nil {
			t.Fatalf("ListOverrides: %v", err)
		}
		if diff := cmp.Diff([]guard.Override{prefix}, got); diff != "" {
			t.Errorf("ListOverrides after removal (-want +got):\n%s", diff)
		}

		// The kinds of a carrier of a country are stored as the others.
		carrier := add(guard.Override{Kind: guard.OverrideCarrierPause, Subject: "NG/mtn", Reason: "wave on one carrier", Author: "alice",
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
		carrierLimit := add(guard.Override{Kind: guard.OverrideCarrierLimit, Subject: "NG/airtel", Limit: 50, Reason: "wave", Author: "alice",
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
		got, err = s.ListOverrides(ctx, now)
		if err != nil {
			t.Fatalf("ListOverrides: %v", err)
		}
		if diff := cmp.Diff([]guard.Override{prefix, carrier, carrierLimit}, got); diff != "" {
			t.Errorf("ListOverrides with a carrier's (-want +got):\n%s", diff)
		}

		// The table refuses what the desk would: an unknown kind, no reason.
		for name, o := range map[string]guard.Override{
			"unknown kind": {Kind: "country_boost", Subject: "NG", Limit: 1, Reason: "x", CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
			"no reason":    {Kind: guard.OverrideBudgetDay, Limit: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
			"expired":      {Kind: guard.OverrideBudgetDay, Limit: 1, Reason: "x", CreatedAt: now, ExpiresAt: now},
		} {
			if _, err := s.AddOverride(ctx, o); err == nil {
				t.Errorf("AddOverride(%s): no error, want a refusal", name)
			}
		}
	})
}
