package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestLocalesListed: the locales docs/verify.md lists under "Locale" are
// the ones a send may name (guard.SupportedLocales), no more, no fewer.
func TestLocalesListed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "verify.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Locale\n")
	if !ok {
		t.Fatal("docs/verify.md: no section Locale")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	m := regexp.MustCompile(`its older list and its newer one together\):([^.]+)\.`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal("docs/verify.md, Locale: no list of locales")
	}
	var listed []string
	for _, l := range strings.Split(m[1], ",") {
		listed = append(listed, strings.TrimSpace(l))
	}
	if diff := cmp.Diff(guard.SupportedLocales(), listed); diff != "" {
		t.Errorf("docs/verify.md's locales against guard.SupportedLocales (-code +docs):\n%s", diff)
	}
}
