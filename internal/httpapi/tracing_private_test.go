package httpapi_test

import (
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// digitRun is six or more digits, possibly split by separators: a phone
// number written as people write it.
var digitRun = regexp.MustCompile(`[0-9](?:[ ().-]{0,2}[0-9]){5,}`)

// TestTraceShowsNothingPersonal: a number written with separators and a
// verification id never reach a span whole, and the span's client address
// follows the trusted-proxy rule (an untrusted peer cannot name it by
// X-Forwarded-For).
func TestTraceShowsNothingPersonal(t *testing.T) {
	ta := newTracedApp(t, defaults())
	w, _ := ta.do(t, "POST", "/otp/send", `{"phone":"`+tracePhone+`"}`)
	if w.Code != 200 {
		t.Fatalf("send: %d %s", w.Code, w.Body)
	}
	id := between(w.Body.String(), `"verification_id":"`, `"`)
	for _, tc := range []struct{ method, path, key string }{
		{"DELETE", "/ops/blocked/+44-7911-12-34-55", opsKey},
		{"DELETE", "/ops/blocked/+44%207911%20123455", opsKey},
		{"GET", "/otp/verifications/" + id, apiKey},
		{"POST", "/otp/verifications/" + id + "/cancel", apiKey},
		{"GET", "/no/such/route/+44-7911-12-34-55", apiKey},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			_, spans := ta.do(t, tc.method, tc.path, "", "Authorization", "Bearer "+tc.key, "X-Forwarded-For", "203.0.113.9")
			r := root(t, spans)
			noSecrets(t, spans, id, id[len(id)-8:], id[2:10])
			for _, a := range r.Attributes {
				if v := a.Value.String(); strings.HasPrefix(string(a.Key), "url.") && digitRun.MatchString(v) {
					t.Errorf("span attribute %s = %q holds a number", a.Key, v)
				}
			}
			if v, ok := attr(r, attribute.Key("client.address")); !ok || v.AsString() == "203.0.113.9" {
				t.Errorf("client.address = %q (set %v), want the peer's address: the peer is no trusted proxy", v.AsString(), ok)
			}
		})
	}
}

func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}
