package guard_test

import (
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
)

func TestNumberTypeAndPrefix(t *testing.T) {
	for _, tc := range []struct{ phone, typ string }{
		{"+919800000000", "mobile"},
		{"+14155550100", "fixed_line_or_mobile"},
		{"+18005550100", "toll_free"},
		{"+449098790000", "premium_rate"},
		{"+442079460000", "fixed_line"},
		{"+88213000000", "voip"},
	} {
		if got := guard.NumberType(tc.phone); got != tc.typ {
			t.Errorf("NumberType(%s): got %q, want %q", tc.phone, got, tc.typ)
		}
	}
	for _, tc := range []struct {
		phone string
		n     int
		want  string
	}{
		{"+919876500123", 4, "+91987650"},
		{"+919876500123", 1, "+91987650012"},
		{"+1415", 8, "+14"},
	} {
		if got := guard.Prefix(tc.phone, tc.n); got != tc.want {
			t.Errorf("Prefix(%s, %d): got %q, want %q", tc.phone, tc.n, got, tc.want)
		}
	}
}
