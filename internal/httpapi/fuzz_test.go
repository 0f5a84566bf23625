package httpapi

import (
	"testing"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// FuzzDecode: whatever the body, decoding returns nil or a 400-class
// *problem.Error, never a panic or an internal error.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"phone":"+919800000000","client_ip":"1.2.3.4"}`, `{"phone":1}`, `{`, ``, `null`,
		`{"checks":[{"policy":"a","key":"b","cost":1}]}`, `{"policy":"a","cost":1e400}`, `{"x":1}`, `[]`, `{"a":1}{}`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var a sendRequest
		var b checkRequest
		for _, v := range []any{&a, &b} {
			err := httpx.DecodeBytes(body, v)
			if err == nil {
				continue
			}
			if code := problem.CodeOf(err); code != problem.CodeInvalidRequest {
				t.Fatalf("decode %q: code %s, want invalid_request", body, code)
			}
		}
	})
}
