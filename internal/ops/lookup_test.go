package ops_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestNumberAnswerRefusing: what refuses a number's next send, worst
// first, each once, with when it clears.
func TestNumberAnswerRefusing(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	in := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	type reason struct {
		Code   problem.Code
		Clears time.Duration
	}
	tests := []struct {
		name string
		a    ops.NumberAnswer
		want []reason
	}{
		{"nothing", ops.NumberAnswer{State: guard.NumberState{Sends: guard.WindowState{Known: true, Count: 1, Limit: 3}}}, nil},
		{"deny-listed until", ops.NumberAnswer{DeniedBy: &guard.DenyEntry{Pattern: "+4474", ExpiresAt: in(time.Hour)}},
			[]reason{{problem.CodeDenied, time.Hour}}},
		{"deny-listed for ever", ops.NumberAnswer{DeniedBy: &guard.DenyEntry{Pattern: "+4474"}}, []reason{{problem.CodeDenied, 0}}},
		{"a block and its window, once", ops.NumberAnswer{
			Blocks: []ops.BlockedNumber{{Block: guard.Block{Reason: problem.CodeCooldown, Until: now.Add(20 * time.Second)}}},
			State: guard.NumberState{Cooldown: guard.WindowState{Known: true, Count: 1, Limit: 1, ResetAfter: 20 * time.Second},
				Sends: guard.WindowState{Known: true, Count: 3, Limit: 3, ResetAfter: 9 * time.Minute}}},
			[]reason{{problem.CodeCooldown, 20 * time.Second}, {problem.CodePhoneRateLimited, 9 * time.Minute}}},
		{"a window not read refuses nothing", ops.NumberAnswer{State: guard.NumberState{Sends: guard.WindowState{Count: 3, Limit: 3}}}, nil},
		{"the network blocks it", ops.NumberAnswer{State: guard.NumberState{Risk: &guard.RiskAnswer{Score: 90, Blocked: true}}},
			[]reason{{problem.CodeHighRiskNumber, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.a.At = now
			var got []reason
			for _, r := range tt.a.Refusing() {
				got = append(got, reason{r.Code, r.Clears})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("refusing (-want +got):\n%s", diff)
			}
		})
	}
}
