package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/otpguard/otpguard/internal/store"
)

// TestOpsDenyIdempotent: a retried POST /ops/denylist with one
// Idempotency-Key adds one entry and answers the first 201 again; with
// another body, 422. Each answer is held to api/openapi.yaml.
func TestOpsDenyIdempotent(t *testing.T) {
	doc := loadSpec(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	oc := newOpsCluster(t, opsConfig{engine: store.EngineSQLite, instances: 2})
	key := map[string]string{"Idempotency-Key": "deny-88213"}
	body := `{"pattern":"+88213","reason":"fraud"}`
	cases := []struct {
		name, body   string
		status       int
		code         string
		replayed     bool
		instance     int
		wantFirstAns bool
	}{
		{name: "first", body: body, status: 201},
		{name: "retry on another instance", body: body, status: 201, replayed: true, instance: 1, wantFirstAns: true},
		{name: "another body", body: `{"pattern":"+88214"}`, status: 422, code: "idempotency_key_reused"},
	}
	opts := &openapi3filter.Options{AuthenticationFunc: opsAuthentication, IncludeResponseStatus: true, MultiError: true}
	var first []byte
	for _, tc := range cases {
		r := oc.doWith(t, tc.instance, "POST", "/ops/denylist", tc.body, opsKey, key)
		if r.Status != tc.status || (r.Header.Get("Idempotent-Replayed") == "true") != tc.replayed {
			t.Fatalf("%s: %d %s (replayed %q), want %d replayed %v", tc.name, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), tc.status, tc.replayed)
		}
		if first == nil {
			first = r.Body
		}
		if tc.wantFirstAns && string(r.Body) != string(first) {
			t.Errorf("%s: %s, want the first answer %s", tc.name, r.Body, first)
		}
		checkProblem(t, tc.name, tc.code, r)
		req := httptest.NewRequest("POST", "/ops/denylist", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+opsKey)
		req.Header.Set("Idempotency-Key", key["Idempotency-Key"])
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("%s: request: %v", tc.name, err)
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.Status, Header: r.Header, Options: opts}
		out.SetBodyBytes(r.Body)
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s: the response does not match the spec: %v", tc.name, err)
		}
	}
	r := oc.doKey(t, 0, http.MethodGet, "/ops/denylist", "", opsKey)
	if n := strings.Count(string(r.Body), `"pattern":"+88213"`); n != 1 {
		t.Errorf("deny-list holds %d entries for +88213, want 1: %s", n, r.Body)
	}
}
