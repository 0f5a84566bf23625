package simulate

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "TestDefaultDrawsUnchanged: rewrite testdata/draws.golden from the current draws")

// TestDefaultDrawsUnchanged holds the numbers a population without
// carriers draws to the ones recorded before carriers existed: the same
// rng calls in the same order, so that every seeded report of a scenario
// that does not name carriers stays what it was, to the byte. The draws
// depend on the numbers' table and the rng alone, not on the service's
// rules, so a change of a rule does not touch them.
func TestDefaultDrawsUnchanged(t *testing.T) {
	var got strings.Builder
	for _, c := range []struct {
		country  string
		prefixes []string
	}{{"NG", nil}, {"IN", nil}, {"GB", nil}, {"PK", nil}, {"001", []string{"+8816", "+870"}}, {"NG", []string{"+234803"}}} {
		src, err := newNumberSource(c.country, c.prefixes)
		if err != nil {
			t.Fatalf("%s %v: %v", c.country, c.prefixes, err)
		}
		r := rand.New(rand.NewPCG(1, 1))
		fmt.Fprintf(&got, "%s %v:", c.country, c.prefixes)
		for range 200 {
			got.WriteString(" " + src.draw(r))
		}
		got.WriteString("\n")
	}
	path := filepath.Join("testdata", "draws.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("the default draws changed: every seeded report would change with them\ngot:\n%s\nwant:\n%s", got.String(), want)
	}
}
