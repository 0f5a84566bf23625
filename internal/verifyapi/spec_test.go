package verifyapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// exchange is one answer the tests saw, as the wire carried it.
type exchange struct {
	method, path string
	status       int
	body         []byte
}

// recorder is an http.RoundTripper that keeps every answer, so that the
// tests can hold what the SDK decoded to the specs.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if err != nil {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.seen = append(r.seen, exchange{method: req.Method, path: req.URL.Path, status: res.StatusCode, body: body})
	r.mu.Unlock()
	return res, nil
}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.seen...)
}

// specPaths are the Verify routes as Twilio's document names them.
var specPaths = []struct {
	re   *regexp.Regexp
	path string
}{
	{regexp.MustCompile(`^/v2/Services/[^/]+/Verifications$`), "/v2/Services/{ServiceSid}/Verifications"},
	{regexp.MustCompile(`^/v2/Services/[^/]+/Verifications/[^/]+$`), "/v2/Services/{ServiceSid}/Verifications/{Sid}"},
	{regexp.MustCompile(`^/v2/Services/[^/]+/VerificationCheck$`), "/v2/Services/{ServiceSid}/VerificationCheck"},
	{regexp.MustCompile(`^/v2/Services/[^/]+$`), "/v2/Services/{Sid}"},
}

// specs are Twilio's Verify v2 document (testdata/README.md) and the
// project's schema of Verify's error body.
type specs struct {
	twilio   *openapi3.T
	errorDoc *openapi3.Schema
}

func loadSpecs(t *testing.T) specs {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile("testdata/twilio_verify_v2.json")
	if err != nil {
		t.Fatalf("loading Twilio's Verify v2 document: %v", err)
	}
	b, err := os.ReadFile("testdata/verify_error.json")
	if err != nil {
		t.Fatal(err)
	}
	var errSchema openapi3.Schema
	if err := json.Unmarshal(b, &errSchema); err != nil {
		t.Fatalf("testdata/verify_error.json: %v", err)
	}
	return specs{twilio: doc, errorDoc: &errSchema}
}

// check holds one answer to its schema (problems) and fails t for each
// difference.
func (s specs) check(t *testing.T, x exchange) {
	t.Helper()
	for _, p := range s.problems(x) {
		t.Errorf("%s %s %d: %s\n%s", x.method, x.path, x.status, p, x.body)
	}
}

// problems holds one answer to its schema: a success to the schema
// Twilio's document gives its route, method and status (a status the
// document does not list is a problem), with every field the schema
// names present; an error to the error body's schema.
func (s specs) problems(x exchange) []string {
	var v any
	if err := json.Unmarshal(x.body, &v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	if x.status >= 400 {
		if err := s.errorDoc.VisitJSON(v); err != nil {
			return []string{"the error body does not match verify_error.json: " + err.Error()}
		}
		return nil
	}
	path := ""
	for _, p := range specPaths {
		if p.re.MatchString(x.path) {
			path = p.path
			break
		}
	}
	item := s.twilio.Paths.Find(path)
	if item == nil {
		return []string{"no such path in Twilio's document"}
	}
	op := item.GetOperation(x.method)
	if op == nil {
		return []string{"no such operation in Twilio's document"}
	}
	res := op.Responses.Status(x.status)
	if res == nil || res.Value == nil {
		return []string{"a status Twilio's document does not list"}
	}
	mt := res.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return []string{"no JSON schema in Twilio's document"}
	}
	var out []string
	if err := mt.Schema.Value.VisitJSON(v); err != nil {
		out = append(out, "the answer does not match Twilio's schema: "+err.Error())
	}
	// Twilio's schemas require nothing; Verify answers every field, and
	// so does otpguard (null where it has nothing to say).
	obj, _ := v.(map[string]any)
	for name := range mt.Schema.Value.Properties {
		if _, ok := obj[name]; !ok {
			out = append(out, "field "+name+" of Twilio's schema is missing")
		}
	}
	return out
}
