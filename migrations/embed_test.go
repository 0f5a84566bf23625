package migrations_test

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/migrations"
)

// The store picks a directory by engine and expects both to reach the same
// schema version; a migration added to one engine only would leave the other
// reporting "up to date" on an older schema.
func TestEnginesHaveTheSameVersions(t *testing.T) {
	names := func(dir string) []string {
		t.Helper()
		entries, err := fs.ReadDir(migrations.FS, dir)
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	pg, lite := names("postgres"), names("sqlite")
	if len(pg) == 0 {
		t.Fatal("no postgres migrations embedded")
	}
	if !slices.Equal(pg, lite) {
		t.Fatalf("postgres migrations %v, sqlite migrations %v: want the same file names", pg, lite)
	}
	for _, dir := range []string{"postgres", "sqlite"} {
		for _, name := range pg {
			b, err := fs.ReadFile(migrations.FS, dir+"/"+name)
			if err != nil {
				t.Fatal(err)
			}
			for _, marker := range []string{"-- +goose Up", "-- +goose Down"} {
				if !strings.Contains(string(b), marker) {
					t.Errorf("%s/%s: no %q section", dir, name, marker)
				}
			}
		}
	}
}
