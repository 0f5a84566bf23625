package sqlstore_test

import (
	"errors"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
)

// TestSignOuts: a sign-out is kept until the session would have expired,
// on both engines; signing out twice is fine; expired ones are not listed.
func TestSignOuts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
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

// TestOpenSQLUnreachable: only a database that does not answer is
// ErrDatabaseUnreachable (the instance starts and retries); one that
// answers no is not (the start fails: a person must fix it).
func TestOpenSQLUnreachable(t *testing.T) {
	base, err := url.Parse(sqltest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := *base
	refused.Host = l.Addr().String()
	l.Close() // nothing listens there now
	missing := *base
	missing.Path = "/otpguard_no_such_database"
	for _, tc := range []struct {
		name        string
		url         string
		unreachable bool
	}{
		{"connection refused", refused.String(), true},
		{"no such database", missing.String(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sqlstore.Open(t.Context(), tc.url, "", sqlstore.Options{Timeout: 2 * time.Second})
			if err == nil {
				t.Fatal("Open succeeded, want an error")
			}
			if got := errors.Is(err, sqlstore.ErrDatabaseUnreachable); got != tc.unreachable {
				t.Errorf("errors.Is(%v, ErrDatabaseUnreachable) = %v, want %v", err, got, tc.unreachable)
			}
		})
	}
}
