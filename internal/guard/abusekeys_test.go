package guard_test

import (
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestUsage: the words the audit trail and the ops page use to name the
// limit a refusal met ("5 of 3 per 10m").
func TestUsage(t *testing.T) {
	tests := []struct {
		count, limit int64
		window       time.Duration
		want         string
	}{
		{5, 3, 10 * time.Minute, "5 of 3 per 10m"},
		{4, 3, time.Hour, "4 of 3 per 1h"},
		{21, 20, 24 * time.Hour, "21 of 20 per 24h"},
		{2, 1, 30 * time.Second, "2 of 1 per 30s"},
		{2, 1, 90 * time.Second, "2 of 1 per 1m30s"},
		{0, 50, time.Minute, "limit 50 per 1m"},
	}
	for _, tt := range tests {
		if got := guard.Usage(tt.count, tt.limit, tt.window); got != tt.want {
			t.Errorf("Usage(%d, %d, %s) = %q, want %q", tt.count, tt.limit, tt.window, got, tt.want)
		}
	}
}
