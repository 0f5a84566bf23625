package guard_test

import (
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

func TestDenyEntryMatches(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }

	tests := []struct {
		name    string
		pattern string
		expires *time.Time
		phone   string
		want    bool
	}{
		{"exact number", "+919800000000", nil, "+919800000000", true},
		{"exact number, other number", "+919800000000", nil, "+919800000001", false},
		{"prefix", "+88213", nil, "+882130000001", true},
		{"prefix of other country", "+88213", nil, "+881230000001", false},
		{"pattern longer than number", "+9198000000001", nil, "+919800000000", false},
		{"country code only", "+1", nil, "+14155550100", true},
		{"not expired yet", "+44", at(time.Second), "+447700900000", true},
		{"expires exactly now", "+44", at(0), "+447700900000", false},
		{"expired", "+44", at(-time.Hour), "+447700900000", false},
		{"empty pattern matches nothing", "", nil, "+447700900000", false},
		{"plus alone matches nothing", "+", nil, "+447700900000", false},
		{"pattern without plus matches nothing", "44", nil, "447700900000", false},
		{"pattern with letters matches nothing", "+44a", nil, "+44a7700900000", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := guard.DenyEntry{Pattern: tt.pattern, ExpiresAt: tt.expires}
			if got := e.Matches(tt.phone, now); got != tt.want {
				t.Errorf("DenyEntry{Pattern: %q}.Matches(%q) = %v, want %v", tt.pattern, tt.phone, got, tt.want)
			}
		})
	}
}

func TestValidateDenyPattern(t *testing.T) {
	tests := []struct {
		pattern string
		valid   bool
	}{
		{"+1", true},
		{"+88213", true},
		{"+919800000000", true},
		{"+123456789012345", true}, // 15 digits, the E.164 maximum
		{"+1234567890123456", false},
		{"", false},
		{"+", false},
		{"1", false},
		{"919800000000", false},
		{"++1", false},
		{"+1 415", false},
		{"+1-415", false},
		{"+٣", false}, // a non-ASCII digit
		{" +1", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			err := guard.ValidateDenyPattern(tt.pattern)
			if tt.valid {
				if err != nil {
					t.Fatalf("ValidateDenyPattern(%q) = %v, want nil", tt.pattern, err)
				}
				return
			}
			if got := problem.CodeOf(err); got != problem.CodeInvalidRequest {
				t.Fatalf("ValidateDenyPattern(%q): code %q, want %q", tt.pattern, got, problem.CodeInvalidRequest)
			}
		})
	}
}
