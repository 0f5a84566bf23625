package guard

import (
	"crypto/rand"
	"testing"
)

// TestFallbackMark: a fallback send's verification reads back as a new
// send's that fell back, never as a solved or trusted one; a new send's
// and a tier's verifications do not read as fallen back.
func TestFallbackMark(t *testing.T) {
	marks := tierMarks{key: []byte("0123456789abcdef0123456789abcdef")}
	for _, tc := range []struct {
		name     string
		make     func(id string) string
		wantTier Tier
		wantFell bool
	}{
		{"fallback", marks.applyFallback, TierNew, true},
		{"new", func(id string) string { return marks.apply(id, TierNew) }, TierNew, false},
		{"solved", func(id string) string { return marks.apply(id, TierSolved) }, TierSolved, false},
		{"trusted", func(id string) string { return marks.apply(id, TierTrusted) }, TierTrusted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fell := 0
			for range 64 { // a random ID carries a mark by chance once in 65,536
				id, err := newVerificationID(rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				id = tc.make(id)
				if got := marks.tier(id); got != tc.wantTier {
					t.Fatalf("tier(%s) = %v, want %v", id, got, tc.wantTier)
				}
				if marks.fellBack(id) {
					fell++
				}
			}
			if want := map[bool]int{true: 64, false: 0}[tc.wantFell]; fell != want {
				t.Errorf("%d of 64 read as fallen back, want %d", fell, want)
			}
		})
	}
}
