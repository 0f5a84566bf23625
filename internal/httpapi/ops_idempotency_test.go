package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/otpguard/otpguard/internal/sqlstore"
)

// otherOpsKey is a second ops key: an Idempotency-Key is scoped to the
// caller, so the same key from it is another request.
const otherOpsKey = "test-ops-key-other-0123456789"

// idempotentOpsPost is one ops POST that takes an Idempotency-Key: a body
// that creates something, another that creates something else, one the
// route refuses, and how to count what the body created.
type idempotentOpsPost struct {
	path              string
	body, other, bad  string
	badStatus         int
	badCode           string
	list, listedMatch string // GET list, and what one created entry shows in it ("": none to count)
	status            int    // the answer of a success: 201 when 0
}

// idempotentOpsPosts are the ops JSON POSTs that create something.
// TestOpsPostsIdempotentRoutes holds this list to the spec.
var idempotentOpsPosts = []idempotentOpsPost{{
	path: "/ops/denylist", body: `{"pattern":"+88213","reason":"fraud"}`, other: `{"pattern":"+88214"}`,
	bad: `{"pattern":"88213x"}`, badStatus: 400, badCode: "invalid_request",
	list: "/ops/denylist", listedMatch: `"pattern":"+88213"`,
}, {
	path: "/ops/overrides", body: `{"kind":"prefix_limit","subject":"+88213","limit":5,"reason":"pumping"}`,
	other: `{"kind":"prefix_limit","subject":"+88214","limit":5,"reason":"pumping"}`,
	bad:   `{"kind":"prefix_limit","subject":"+88213","limit":5}`, badStatus: 400, badCode: "invalid_request",
	list: "/ops/overrides", listedMatch: `"subject":"+88213"`,
}, {
	// An import is idempotent of itself: nothing to count in a list.
	path: "/ops/trusted-numbers", body: `{"numbers":["+447911123456","+4470"]}`, other: `{"numbers":["+447911123458"]}`,
	bad: `{}`, badStatus: 400, badCode: "invalid_request", status: 200,
}}

// created is the status of p's success.
func (p idempotentOpsPost) created() int {
	if p.status == 0 {
		return http.StatusCreated
	}
	return p.status
}

// TestOpsPostsIdempotent: a retried ops POST with one Idempotency-Key
// creates one thing and answers the first 201 again, on either of two
// instances sharing one real Redis; a malformed request's 400 is not kept;
// with another body it is 422; the same key from another ops key is that
// caller's own request. Each answer is held to api/openapi.yaml.
func TestOpsPostsIdempotent(t *testing.T) {
	doc := loadSpec(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, instances: 2, opsKeys: []string{opsKey, otherOpsKey}})
	for _, p := range idempotentOpsPosts {
		t.Run(strings.TrimPrefix(p.path, "/ops/"), func(t *testing.T) {
			// The keys differ per route: one key on two routes is reused.
			idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": p.path + "-" + k} }
			cases := []struct {
				name, body, key, opsKey string
				status                  int
				code                    string
				replayed                bool
				instance                int
				sameAs                  string // the case whose answer this one repeats
				badRequest              bool   // the request itself breaks the spec
			}{
				{name: "first", body: p.body, key: "k1", status: p.created()},
				{name: "retry on another instance", body: p.body, key: "k1", status: p.created(), replayed: true, instance: 1, sameAs: "first"},
				{name: "retry on the first instance", body: p.body, key: "k1", status: p.created(), replayed: true, sameAs: "first"},
				{name: "another body", body: p.other, key: "k1", status: 422, code: "idempotency_key_reused"},
				{name: "refused", body: p.bad, key: "k2", status: p.badStatus, code: p.badCode, badRequest: true},
				// A malformed request (400) has no side effect: not kept,
				// it runs again (idempotency.go, keepFor).
				{name: "refused again: not kept", body: p.bad, key: "k2", status: p.badStatus, code: p.badCode, instance: 1, badRequest: true},
				{name: "too long a key", body: p.body, key: strings.Repeat("k", 256), status: 400, code: "invalid_idempotency_key", badRequest: true},
				{name: "same key, another ops key", body: p.body, key: "k1", opsKey: otherOpsKey, status: p.created()},
			}
			opts := &openapi3filter.Options{AuthenticationFunc: opsAuthentication, IncludeResponseStatus: true, MultiError: true}
			answers := map[string][]byte{}
			for _, tc := range cases {
				key := opsKey
				if tc.opsKey != "" {
					key = tc.opsKey
				}
				r := oc.doWith(t, tc.instance, "POST", p.path, tc.body, key, idem(tc.key))
				if r.Status != tc.status || (r.Header.Get("Idempotent-Replayed") == "true") != tc.replayed {
					t.Fatalf("%s: %d %s (replayed %q), want %d replayed %v", tc.name, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), tc.status, tc.replayed)
				}
				answers[tc.name] = r.Body
				if tc.sameAs != "" && string(r.Body) != string(answers[tc.sameAs]) {
					t.Errorf("%s: %s, want the first answer %s", tc.name, r.Body, answers[tc.sameAs])
				}
				checkProblem(t, tc.name, tc.code, r)
				checkOpsContract(t, router, opts, tc.name, p.path, tc.body, key, idem(tc.key)["Idempotency-Key"], r, tc.badRequest)
			}
			// One created by the ops key, one by the other; none by the retries.
			if p.list == "" {
				return
			}
			r := oc.doKey(t, 0, http.MethodGet, p.list, "", opsKey)
			if n := strings.Count(string(r.Body), p.listedMatch); n != 2 {
				t.Errorf("%s holds %d entries matching %s, want 2 (one per ops key): %s", p.list, n, p.listedMatch, r.Body)
			}
		})
	}
}

// TestOpsPostsIdempotentConcurrent: 20 concurrent copies of one ops POST
// with one Idempotency-Key, over two instances on one real Redis, create
// exactly one thing, and every copy answers 201 with its body.
func TestOpsPostsIdempotentConcurrent(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, instances: 2})
	for _, p := range idempotentOpsPosts {
		t.Run(strings.TrimPrefix(p.path, "/ops/"), func(t *testing.T) {
			const n = 20
			key := map[string]string{"Idempotency-Key": "concurrent-" + p.path}
			res := make([]response, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { res[i] = oc.doWith(t, i, "POST", p.path, p.body, opsKey, key) })
			}
			wg.Wait()
			replayed := 0
			for i, r := range res {
				if r.Status != p.created() || string(r.Body) != string(res[0].Body) {
					t.Errorf("copy %d: %d %s, want %d %s", i, r.Status, r.Body, p.created(), res[0].Body)
				}
				if r.Header.Get("Idempotent-Replayed") == "true" {
					replayed++
				}
			}
			if replayed != n-1 {
				t.Errorf("%d answers replayed, want %d", replayed, n-1)
			}
			if p.list == "" {
				return
			}
			r := oc.doKey(t, 0, http.MethodGet, p.list, "", opsKey)
			if got := strings.Count(string(r.Body), p.listedMatch); got != 1 {
				t.Errorf("%s holds %d entries matching %s, want 1: %s", p.list, got, p.listedMatch, r.Body)
			}
		})
	}
}

// TestOpsPostsIdempotentRoutes: every ops POST that takes JSON declares
// the Idempotency-Key header in api/openapi.yaml, with its 409 and a 422
// for idempotency_key_reused, and is one that TestOpsPostsIdempotent
// exercises. The page's forms (form bodies, answered with 303) do not
// take it.
func TestOpsPostsIdempotentRoutes(t *testing.T) {
	doc := loadSpec(t)
	tested := map[string]bool{}
	for _, p := range idempotentOpsPosts {
		tested[p.path] = true
	}
	for path, item := range doc.Paths.Map() {
		op := item.Post
		if !strings.HasPrefix(path, "/ops/") || op == nil || op.RequestBody == nil ||
			op.RequestBody.Value.Content.Get("application/json") == nil {
			continue
		}
		if !hasParam(op.Parameters, "header", "Idempotency-Key") {
			t.Errorf("POST %s takes JSON but declares no Idempotency-Key header", path)
		}
		if !tested[path] {
			t.Errorf("POST %s takes JSON but TestOpsPostsIdempotent does not exercise it", path)
		}
		if r := op.Responses.Status(422); op.Responses.Status(409) == nil || r == nil || !strings.Contains(specText(t, r.Value), "idempotency_key_reused") {
			t.Errorf("POST %s: no 409 or no 422 idempotency_key_reused in the spec", path)
		}
	}
}

func hasParam(ps openapi3.Parameters, in, name string) bool {
	for _, p := range ps {
		if p.Value != nil && p.Value.In == in && p.Value.Name == name {
			return true
		}
	}
	return false
}

// specText is a spec object as JSON, for looking for a code in it.
func specText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkOpsContract holds one ops POST and its answer r to the spec (the
// request only when it keeps to it).
func checkOpsContract(t *testing.T, router routers.Router, opts *openapi3filter.Options, name, path, body, opsKey, idemKey string, r response, badRequest bool) {
	t.Helper()
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+opsKey)
	req.Header.Set("Idempotency-Key", idemKey)
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatal(err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && !badRequest {
		t.Errorf("%s: request: %v", name, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.Status, Header: r.Header, Options: opts}
	out.SetBodyBytes(r.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: the response does not match the spec: %v", name, err)
	}
}
