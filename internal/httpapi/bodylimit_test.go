package httpapi_test

import (
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/httpapi"
)

// TestBodyLimitIs16KiB: the docs promise 16 KiB; a body of exactly 16,384
// bytes is read, one byte more is 413 body_too_large.
func TestBodyLimitIs16KiB(t *testing.T) {
	if httpapi.BodyLimit != 16384 {
		t.Fatalf("BodyLimit = %d, want 16384 (16 KiB, as the docs say)", httpapi.BodyLimit)
	}
	c, _ := miniCluster(t, 1, defaults())
	// A valid check padded with spaces to the size under test.
	body := func(n int) string {
		b := `{"policy":"default","key":"k"}`
		return b + strings.Repeat(" ", n-len(b))
	}
	for _, tc := range []struct {
		name   string
		size   int
		status int
	}{
		{"exactly 16 KiB", 16384, 200},
		{"one byte over", 16385, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(t, 0, "POST", "/limits/check", body(tc.size))
			if r.Status != tc.status {
				t.Fatalf("a %d-byte body: got %d %s, want %d", tc.size, r.Status, r.Body, tc.status)
			}
			if tc.status == 413 && r.json(t)["code"] != "body_too_large" {
				t.Errorf("code %v, want body_too_large", r.json(t)["code"])
			}
		})
	}
}
