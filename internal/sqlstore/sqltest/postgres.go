// Package sqltest gives tests a real database of their own. It lives apart
// from sqlstore so that any package's tests can use it without importing
// sqlstore, and it never touches a database it did not create.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// DefaultPostgresURL is the server used when OTPGUARD_TEST_POSTGRES_URL is
// unset: a local PostgreSQL with trust authentication.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Postgres creates a fresh, empty database on the test PostgreSQL server and
// returns its URL; the database is dropped when t and its subtests finish.
// The server comes from OTPGUARD_TEST_POSTGRES_URL (DefaultPostgresURL when
// unset), which must name a database the user may connect to and a user
// allowed to CREATE DATABASE.
//
// When the server cannot be reached the test is skipped, so that `go test
// ./...` passes on a laptop without PostgreSQL; with
// OTPGUARD_REQUIRE_SERVICES=1 (set in CI) it fails instead, so that a broken
// service cannot turn the suite quietly green.
func Postgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv("OTPGUARD_TEST_POSTGRES_URL")
	if base == "" {
		base = DefaultPostgresURL
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("sqltest: OTPGUARD_TEST_POSTGRES_URL: %v", err)
	}

	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("sqltest: open %s: %v", u.Redacted(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		msg := "PostgreSQL not reachable at %s (%v); set OTPGUARD_TEST_POSTGRES_URL"
		if os.Getenv("OTPGUARD_REQUIRE_SERVICES") == "1" {
			t.Fatalf(msg+" (OTPGUARD_REQUIRE_SERVICES=1 forbids skipping)", u.Redacted(), err)
		}
		t.Skipf(msg+", or OTPGUARD_REQUIRE_SERVICES=1 to fail instead of skipping", u.Redacted(), err)
	}

	// The name is generated, never taken from input, so it is safe to splice
	// into DDL (CREATE DATABASE takes no bind parameters).
	name := "otpguard_test_" + randomHex(8)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("sqltest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE ends connections a failed test left open; without it the
		// drop would fail and the database would pile up on the server.
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("sqltest: drop database %s: %v", name, err)
		}
	})

	fresh := *u
	fresh.Path = "/" + name
	fresh.RawPath = ""
	return fresh.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
