package config

import (
	"strings"
	"testing"
)

// TestLogAllowedChecksBounds: OTPGUARD_LOG_ALLOWED_CHECKS takes 1 (every
// allowed check) to 1,000,000 and names itself when refused.
func TestLogAllowedChecksBounds(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int // 0: refused
	}{
		{"", DefaultLogAllowedChecks},
		{"1", 1},
		{"1000000", 1_000_000},
		{"0", 0},
		{"1000001", 0},
		{"-5", 0},
		{"ten", 0},
	} {
		cfg, err := Load(func(k string) string {
			if k == "OTPGUARD_LOG_ALLOWED_CHECKS" {
				return tc.value
			}
			return ""
		})
		if err == nil {
			err = cfg.Validate()
		}
		switch {
		case tc.want == 0 && err == nil:
			t.Errorf("%q: accepted as %d, want refused", tc.value, cfg.LogAllowedChecks)
		case tc.want == 0 && !strings.Contains(err.Error(), "OTPGUARD_LOG_ALLOWED_CHECKS"):
			t.Errorf("%q: error %q does not name the variable", tc.value, err)
		case tc.want != 0 && err != nil:
			t.Errorf("%q: %v, want %d", tc.value, err, tc.want)
		case tc.want != 0 && cfg.LogAllowedChecks != tc.want:
			t.Errorf("%q: got %d, want %d", tc.value, cfg.LogAllowedChecks, tc.want)
		}
	}
}
