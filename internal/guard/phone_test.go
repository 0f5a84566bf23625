package guard

import (
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/problem"
)

func TestParsePhone(t *testing.T) {
	for _, tc := range []struct {
		raw, region, want, wantRegion string
		code                          problem.Code
	}{
		{raw: "+91 98000 00000", want: "+919800000000", wantRegion: "IN"},
		{raw: "+91-98000-00000", want: "+919800000000", wantRegion: "IN"},
		{raw: "+919800000000", want: "+919800000000", wantRegion: "IN"},
		{raw: "0091 98000 00000", region: "GB", want: "+919800000000", wantRegion: "IN"},
		{raw: "98000 00000", region: "IN", want: "+919800000000", wantRegion: "IN"},
		{raw: "(415) 555-0100", region: "us", want: "+14155550100", wantRegion: "US"},
		{raw: "98000 00000", code: problem.CodeInvalidPhone},
		{raw: "", code: problem.CodeInvalidPhone},
		{raw: "+91 98", code: problem.CodeInvalidPhone},
		{raw: "hello", code: problem.CodeInvalidPhone},
		{raw: "+" + strings.Repeat("9", 80), code: problem.CodeInvalidPhone},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			got, err := ParsePhone(tc.raw, tc.region)
			if problem.CodeOf(err) != tc.code {
				t.Fatalf("ParsePhone(%q) error %v, want code %q", tc.raw, err, tc.code)
			}
			if got.E164 != tc.want || got.Region != tc.wantRegion {
				t.Errorf("ParsePhone(%q) = %+v, want %s %s", tc.raw, got, tc.want, tc.wantRegion)
			}
		})
	}
}

func TestIPSubject(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"", ""},
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::ffff", "2001:db8:1:2::/64"},
	} {
		got, err := IPSubject(tc.raw)
		if err != nil || got != tc.want {
			t.Errorf("IPSubject(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
	// A zone names an interface of the caller's own host: never an end
	// user's address, and one with a NUL in it would poison the audit trail.
	for _, bad := range []string{"not-an-ip", "fe80::1%eth0", "fe80::1%\x00"} {
		if _, err := IPSubject(bad); problem.CodeOf(err) != problem.CodeInvalidRequest {
			t.Errorf("IPSubject(%q) error %v, want invalid_request", bad, err)
		}
		if got := CleanIP(bad); got != "" {
			t.Errorf("CleanIP(%q) = %q, want \"\"", bad, got)
		}
	}
	for raw, want := range map[string]string{" 203.0.113.7 ": "203.0.113.7", "::ffff:203.0.113.7": "203.0.113.7", "2001:DB8::1": "2001:db8::1"} {
		if got := CleanIP(raw); got != want {
			t.Errorf("CleanIP(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestMaskPhone(t *testing.T) {
	if got, want := MaskPhone("+919800000012"), "+91********12"; got != want {
		t.Errorf("MaskPhone = %q, want %q", got, want)
	}
}

// FuzzParsePhone: any input parses to a valid E.164 number or is refused
// with invalid_phone; nothing panics.
func FuzzParsePhone(f *testing.F) {
	for _, s := range []string{"+91 98000 00000", "+1 (415) 555-0100", "", "+", "00", "+999999999999999999", "tel:+1-415-555-0100", "\x00"} {
		f.Add(s, "")
		f.Add(s, "IN")
	}
	f.Fuzz(func(t *testing.T, raw, region string) {
		p, err := ParsePhone(raw, region)
		if err != nil {
			if problem.CodeOf(err) != problem.CodeInvalidPhone {
				t.Fatalf("ParsePhone(%q, %q): code %s, want invalid_phone", raw, region, problem.CodeOf(err))
			}
			return
		}
		if !strings.HasPrefix(p.E164, "+") || len(p.E164) > 16 {
			t.Fatalf("ParsePhone(%q) = %q, not E.164", raw, p.E164)
		}
		again, err := ParsePhone(p.E164, "")
		if err != nil || again.E164 != p.E164 {
			t.Fatalf("E.164 %q does not parse back to itself: %q, %v", p.E164, again.E164, err)
		}
	})
}
