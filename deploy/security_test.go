package deploy_test

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// maxExposure is the highest `systemd-analyze security` exposure the unit
// may have: "OK" on systemd's scale, where 0 is fully closed and 10 is no
// sandbox at all.
const maxExposure = 2.0

// TestUnitSecurityExposure rates the unit's sandbox with systemd's own
// analyzer, offline (no running systemd needed), holds it at maxExposure
// or below, and holds docs/deploy.md's stated score to the analyzer's.
func TestUnitSecurityExposure(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		redistest.Unavailable(t, "systemd-analyze not on PATH (apt-get install systemd)")
	}
	// --threshold is on a scale of 100: the analyzer's own exit status
	// agrees with the parsed score.
	out, err := exec.Command(bin, "security", "--offline=yes", "--no-pager",
		"--threshold="+strconv.Itoa(int(maxExposure*10)), "systemd/otpguard.service").CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for otpguard\.service: ([0-9.]+) (\w+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: no overall exposure level (%v):\n%s", err, out)
	}
	score, perr := strconv.ParseFloat(string(m[1]), 64)
	if perr != nil {
		t.Fatal(perr)
	}
	if score > maxExposure || err != nil {
		t.Errorf("the unit's exposure: got %.1f %s, want %.1f or below (%v):\n%s", score, m[2], maxExposure, err, out)
	}
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	stated := regexp.MustCompile(`rates its\s+exposure\s+\*\*([0-9.]+) \((\w+)\)\*\*`).FindSubmatch(doc)
	if stated == nil {
		t.Fatal("deploy.md: no \"rates its exposure **N.N (LEVEL)**\"")
	}
	if string(stated[1]) != string(m[1]) || string(stated[2]) != string(m[2]) {
		t.Errorf("deploy.md states the exposure %s (%s); systemd-analyze says %s (%s)", stated[1], stated[2], m[1], m[2])
	}
}
