package doccheck

import (
	"flag"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/doccheck/walk"
)

// The walks of a send and of a check, from their handlers: the functions
// by name (a package's path inside the module, then the function or the
// method with its receiver), so that a rename is one line here.
var walks = []struct {
	name  string
	entry string
}{
	{"send", "internal/httpapi.(*otpHandlers).sendOTP"},
	{"check", "internal/httpapi.(*limitHandlers).checkLimits"},
}

// maxReturns bounds each walk's returns to a file it already left (the
// house style: each step in the file of its concept, returning to the
// function that lists the steps, never calling back into a file left).
// docs/architecture.md states each walk's count.
var maxReturns = map[string]int{"send": 10, "check": 10}

var walkSteps = flag.Bool("walk.steps", false, "TestWalkReturns: log every function of each walk")

// TestWalkReturns follows a send and a check through the module's static
// calls and fails when either returns to a file it already left more than
// maxReturns times. `go test -run TestWalkReturns -v ./internal/doccheck`
// prints each walk's returns and its entries per file; -walk.steps adds
// the functions in call order.
func TestWalkReturns(t *testing.T) {
	prog, err := walk.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range walks {
		w, err := prog.Walk(c.entry)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var b strings.Builder
		w.Report(&b, *walkSteps)
		t.Logf("%s, from %s: %s", c.name, c.entry, b.String())
		if got, limit := w.Returns(), maxReturns[c.name]; got > limit {
			t.Errorf("the %s's walk returns to a file it already left %d times, over %d (go test -run TestWalkReturns -v -walk.steps ./internal/doccheck lists its steps)",
				c.name, got, limit)
		}
	}
}
