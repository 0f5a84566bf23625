package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/go-cmp/cmp"
	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/api/spectest"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// loadSpec loads api/openapi.yaml and checks it is a valid OpenAPI document.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("api/openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

func TestOpenAPISpecValidates(t *testing.T) {
	doc := loadSpec(t)
	if got, want := doc.OpenAPI, "3.0.3"; got != want {
		t.Errorf("openapi version: got %q, want %q", got, want)
	}
	if _, err := gorillamux.NewRouter(doc); err != nil {
		t.Errorf("no router can be built from the spec: %v", err)
	}
}

// TestOpenAPIRoutesMatchSpec holds the routes the server registers and the
// operations of the spec to each other, both ways.
func TestOpenAPIRoutesMatchSpec(t *testing.T) {
	doc := loadSpec(t)
	srv := httpapi.New(httpapi.Options{APIKeys: []string{apiKey}, OpsKeys: []string{opsKey}, Spec: api.OpenAPI})

	var registered []string
	for _, r := range srv.Routes() {
		// echo's own catch-alls are not API routes.
		if r.Method == echo.RouteNotFound || r.Method == "echo_route_any" || strings.Contains(r.Path, "*") {
			continue
		}
		registered = append(registered, r.Method+" "+openAPIPath(r.Path))
	}
	var specified []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			specified = append(specified, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(registered)
	registered = slices.Compact(registered)
	slices.Sort(specified)
	for _, r := range registered {
		if !slices.Contains(specified, r) {
			t.Errorf("route %s is registered in server.go but missing from api/openapi.yaml", r)
		}
	}
	for _, s := range specified {
		if !slices.Contains(registered, s) {
			t.Errorf("operation %s is in api/openapi.yaml but no such route is registered", s)
		}
	}
	if len(registered) == 0 {
		t.Error("the server registered no routes")
	}
}

// openAPIPath turns echo's "/ops/blocks/:id" into "/ops/blocks/{id}".
func openAPIPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			parts[i] = "{" + name + "}"
		}
	}
	return strings.Join(parts, "/")
}

func TestOpenAPIPathConversion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/otp/send", "/otp/send"},
		{"/ops/blocks/:id", "/ops/blocks/{id}"},
		{"/ops/:kind/:id/history", "/ops/{kind}/{id}/history"},
	} {
		if got := openAPIPath(tc.in); got != tc.want {
			t.Errorf("openAPIPath(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestOpenAPIProblemCodes holds the spec's ProblemCode enum to the
// problem.Code constants (read from the source, so a new code cannot be
// forgotten), and every code a response narrows to, to that enum.
func TestOpenAPIProblemCodes(t *testing.T) {
	doc := loadSpec(t)
	var spec []string
	for _, v := range doc.Components.Schemas["ProblemCode"].Value.Enum {
		spec = append(spec, v.(string))
	}
	slices.Sort(spec)
	if diff := cmp.Diff(problemCodes(t), spec); diff != "" {
		t.Errorf("components.schemas.ProblemCode.enum differs from the problem.Code constants (-problem +spec):\n%s", diff)
	}

	for name, ref := range doc.Components.Responses {
		mt := ref.Value.Content.Get("application/problem+json")
		if mt == nil {
			continue
		}
		for _, part := range mt.Schema.Value.AllOf {
			code := part.Value.Properties["code"]
			if code == nil {
				continue
			}
			for _, v := range code.Value.Enum {
				if !slices.Contains(spec, v.(string)) {
					t.Errorf("components.responses.%s narrows code to %q, which is not a ProblemCode", name, v)
				}
			}
		}
	}
}

// problemCodes returns the values of every constant of type problem.Code.
func problemCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../problem/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var codes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: a problem.Code constant that is not a string literal", fset.Position(v.Pos()))
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, s)
				}
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("found no problem.Code constants in ../guard")
	}
	slices.Sort(codes)
	return codes
}

// noKey sends a request without Authorization.
const noKey = "\x00none"

// contractEnv is what a contract case may reach before it runs.
type contractEnv struct {
	c *cluster
	m *miniredis.Miniredis
}

// contractCase is one real request and the response it must get.
type contractCase struct {
	name   string
	before func(t *testing.T, e contractEnv) // unvalidated set-up
	after  func(t *testing.T, e contractEnv)
	method string
	path   string
	pathFn func(t *testing.T, e contractEnv) string // instead of path, when it depends on earlier cases
	header map[string]string                        // request headers besides Authorization
	body   string
	bodyFn func(t *testing.T, e contractEnv) string // instead of body, when it depends on earlier cases
	key    string                                   // "" sends the API key; noKey sends none
	status int
	code   string // the problem's code; "" when the answer is not a problem
	// badRequest marks a request that breaks the spec on purpose (the server
	// must refuse it): validating it must fail, the response must still validate.
	badRequest bool
	// routeless marks a method and path the spec does not have: the
	// response is held to the spec's route-less responses (404, 405, 413).
	routeless bool
	check     func(t *testing.T, r response)
}

// TestOpenAPIContract drives a scenario through a real server and holds
// every request and response to api/openapi.yaml.
func TestOpenAPIContract(t *testing.T) {
	doc := loadSpec(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	policies := defaults()
	policies.Limits["login"] = limit.Policy{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute}
	policies.Limits["shadowed"] = limit.Policy{Algorithm: limit.TokenBucket, Capacity: 1, RefillPerSecond: 0.01, Shadow: true}
	// A short wait for a running Idempotency-Key's answer: the 409 case.
	c, m := miniCluster(t, 1, policies, app.WithIdempotencyWait(50*time.Millisecond))
	env := contractEnv{c: c, m: m}

	const phone = "+14155550100"
	verify := func(phone string, code func(t *testing.T, e contractEnv) string) func(t *testing.T, e contractEnv) string {
		return func(t *testing.T, e contractEnv) string {
			return fmt.Sprintf(`{"phone":%q,"code":%q}`, phone, code(t, e))
		}
	}
	lastCode := func(phone string) func(t *testing.T, e contractEnv) string {
		return func(t *testing.T, e contractEnv) string { return e.c.out.LastCode(t, phone) }
	}
	wrongCode := func(phone string) func(t *testing.T, e contractEnv) string {
		return func(t *testing.T, e contractEnv) string {
			if e.c.out.LastCode(t, phone) == "000000" {
				return "111111"
			}
			return "000000"
		}
	}
	failSMS := func(err error) func(t *testing.T, e contractEnv) {
		return func(t *testing.T, e contractEnv) {
			e.c.out.SetFail(err)
		}
	}
	attemptsLeft := func(want float64) func(t *testing.T, r response) {
		return func(t *testing.T, r response) {
			if got, ok := r.json(t)["attempts_left"]; !ok || got != want {
				t.Errorf("attempts_left: got %v, want %v", got, want)
			}
		}
	}
	decisions := func(want ...string) func(t *testing.T, r response) {
		return func(t *testing.T, r response) {
			var body struct {
				Decisions []struct {
					Allowed    bool  `json:"allowed"`
					WouldAllow *bool `json:"would_allow"`
				} `json:"decisions"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range body.Decisions {
				s := strconv.FormatBool(d.Allowed)
				if d.WouldAllow != nil {
					s += "/would " + strconv.FormatBool(*d.WouldAllow)
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decisions allowed (-want +got):\n%s", diff)
			}
		}
	}
	modes := func(want ...string) func(t *testing.T, r response) {
		return func(t *testing.T, r response) {
			var body struct {
				Decisions []struct {
					Mode string `json:"mode"`
				} `json:"decisions"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range body.Decisions {
				got = append(got, d.Mode)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decisions mode (-want +got):\n%s", diff)
			}
		}
	}
	header := func(name, want string) func(t *testing.T, r response) {
		return func(t *testing.T, r response) {
			if got := r.Header.Get(name); got != want {
				t.Errorf("%s: got %q, want %q", name, got, want)
			}
		}
	}
	batch := func(n int) string {
		checks := make([]string, n)
		for i := range checks {
			checks[i] = fmt.Sprintf(`{"policy":"default","key":"many:%d","cost":0}`, i)
		}
		return `{"checks":[` + strings.Join(checks, ",") + `]}`
	}
	// ids: the verification ids sent, by number (and first answers, by key).
	ids := map[string]string{}
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	verification := func(phone, suffix string) func(t *testing.T, e contractEnv) string {
		return func(t *testing.T, e contractEnv) string { return "/otp/verifications/" + ids[phone] + suffix }
	}
	sendFor := func(phone string) func(t *testing.T, e contractEnv) {
		return func(t *testing.T, e contractEnv) {
			r := e.c.do(t, 0, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q}`, phone))
			if r.Status != 200 {
				t.Fatalf("send: got %d, want 200: %s", r.Status, r.Body)
			}
			ids[phone] = fmt.Sprint(r.json(t)["verification_id"])
		}
	}
	verificationIs := func(status string, attempts float64) func(t *testing.T, r response) {
		return func(t *testing.T, r response) {
			b := r.json(t)
			if b["status"] != status || b["attempts"] != attempts {
				t.Errorf("verification: status %v attempts %v, want %s and %v", b["status"], b["attempts"], status, attempts)
			}
		}
	}
	huge := func(prefix string) string { return prefix + strings.Repeat(" ", httpapi.BodyLimit+1) + "}" }

	cases := []contractCase{
		// meta: open, no key needed
		{name: "healthz", method: "GET", path: "/healthz", key: noKey, status: 200},
		{name: "readyz", method: "GET", path: "/readyz", key: noKey, status: 200},
		{name: "metrics", method: "GET", path: "/metrics", key: noKey, status: 200,
			check: func(t *testing.T, r response) {
				if !bytes.Contains(r.Body, []byte("otpguard_decisions_total")) && !bytes.Contains(r.Body, []byte("go_goroutines")) {
					t.Errorf("metrics body holds no known metric: %.200s", r.Body)
				}
			}},
		{name: "openapi.yaml", method: "GET", path: "/openapi.yaml", key: noKey, status: 200,
			check: func(t *testing.T, r response) {
				if !bytes.Equal(r.Body, api.OpenAPI) {
					t.Error("GET /openapi.yaml does not serve api/openapi.yaml")
				}
			}},
		{name: "healthz body over 16 KiB", method: "GET", path: "/healthz", key: noKey, body: huge("{"), status: 413, code: "body_too_large"},

		// POST /otp/send
		{name: "send", method: "POST", path: "/otp/send", body: `{"phone":"+1 415-555-0100","client_ip":"203.0.113.7"}`, status: 200,
			check: func(t *testing.T, r response) {
				if got := r.json(t)["phone"]; got != phone {
					t.Errorf("phone: got %v, want %s", got, phone)
				}
				if got := r.json(t)["status"]; got != "pending" {
					t.Errorf("status: got %v, want pending", got)
				}
				ids[phone] = fmt.Sprint(r.json(t)["verification_id"])
			}},
		// Idempotency-Key
		{name: "send with idempotency key", method: "POST", path: "/otp/send", header: idem("k-1"), body: `{"phone":"+14155550108"}`, status: 200,
			check: func(t *testing.T, r response) { ids["k-1"] = string(r.Body) }},
		{name: "send with idempotency key again: replayed", method: "POST", path: "/otp/send", header: idem("k-1"), body: `{"phone":"+14155550108"}`, status: 200,
			check: func(t *testing.T, r response) {
				header("Idempotent-Replayed", "true")(t, r)
				if string(r.Body) != ids["k-1"] {
					t.Errorf("replayed body %s, want the first %s", r.Body, ids["k-1"])
				}
			}},
		{name: "send with idempotency key and another body", method: "POST", path: "/otp/send", header: idem("k-1"), body: `{"phone":"+14155550109"}`,
			status: 422, code: "idempotency_key_reused"},
		{name: "send with too long an idempotency key", method: "POST", path: "/otp/send", header: idem(strings.Repeat("k", 256)), body: `{"phone":"+14155550109"}`,
			status: 400, code: "invalid_idempotency_key", badRequest: true},
		{name: "send with a refusal kept: replayed", method: "POST", path: "/otp/send", header: idem("k-2"), body: `{"phone":"12345"}`, status: 422, code: "invalid_phone",
			before: func(t *testing.T, e contractEnv) {
				if r := e.c.doWith(t, 0, "POST", "/otp/send", `{"phone":"12345"}`, apiKey, idem("k-2")); r.Status != 422 {
					t.Fatalf("first: %d %s", r.Status, r.Body)
				}
			},
			check: header("Idempotent-Replayed", "true")},
		{name: "send with idempotency key in progress", method: "POST", path: "/otp/send", header: idem("k-3"), body: `{"phone":"+14155550110"}`,
			status: 409, code: "idempotency_key_in_progress", check: header("Retry-After", "1"),
			before: func(t *testing.T, e contractEnv) {
				// The first request is held at the provider until after.
				// (Set before any send of this case: Send reads them unlocked.
				// Never unset: once hold is closed, later sends pass, each
				// leaving a token in held's ample buffer.)
				e.c.out.Hold, e.c.out.Held = make(chan struct{}), make(chan struct{}, 1000)
				go post(e.c.instances[0].srv.URL+"/otp/send", `{"phone":"+14155550110"}`, idem("k-3"))
				<-e.c.out.Held
			},
			after: func(t *testing.T, e contractEnv) { close(e.c.out.Hold) }},
		{name: "send again in cooldown", method: "POST", path: "/otp/send", body: `{"phone":"+14155550100"}`, status: 429, code: "cooldown"},
		{name: "send invalid phone", method: "POST", path: "/otp/send", body: `{"phone":"12345"}`, status: 422, code: "invalid_phone"},
		{name: "send invalid client_ip", method: "POST", path: "/otp/send", body: `{"phone":"+14155550101","client_ip":"not-an-ip"}`, status: 400, code: "invalid_request"},
		{name: "send malformed JSON", method: "POST", path: "/otp/send", body: `{"phone":`, status: 400, code: "invalid_request", badRequest: true},
		{name: "send unknown field", method: "POST", path: "/otp/send", body: `{"phone":"+14155550101","sms":"hi"}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "send empty body", method: "POST", path: "/otp/send", body: ``, status: 400, code: "invalid_request", badRequest: true},
		{name: "send without key", method: "POST", path: "/otp/send", key: noKey, body: `{"phone":"+14155550101"}`, status: 401, code: "unauthorized", badRequest: true,
			check: header("WWW-Authenticate", `Bearer realm="otpguard"`)},
		{name: "send with unknown key", method: "POST", path: "/otp/send", key: "not-a-key-0123456789", body: `{"phone":"+14155550101"}`, status: 401, code: "unauthorized",
			check: header("WWW-Authenticate", `Bearer realm="otpguard", error="invalid_token"`)},
		{name: "send with ops key", method: "POST", path: "/otp/send", key: opsKey, body: `{"phone":"+14155550101"}`, status: 403, code: "forbidden"},
		{name: "send body over 16 KiB", method: "POST", path: "/otp/send", body: huge(`{"phone":"+14155550101"`), status: 413, code: "body_too_large"},
		{name: "send provider down", method: "POST", path: "/otp/send", body: `{"phone":"+14155550102"}`, status: 502, code: "provider_unavailable",
			before: failSMS(errors.New("provider down")), after: failSMS(nil)},
		{name: "send the provider refused", method: "POST", path: "/otp/send", body: `{"phone":"+14155550131"}`, status: 502, code: "provider_unavailable",
			before: failSMS(&problem.Error{Code: problem.CodeProviderUnavailable, Message: "refused", Err: guard.ErrNotSent}), after: failSMS(nil),
			check: header("Retry-After", "5")},
		{name: "send destination refused", method: "POST", path: "/otp/send", body: `{"phone":"+14155550103"}`, status: 422, code: "invalid_destination",
			before: failSMS(problem.Errorf(problem.CodeInvalidDestination, "the provider refused the number")), after: failSMS(nil)},

		// POST /otp/verify
		{name: "verify wrong code", method: "POST", path: "/otp/verify", bodyFn: verify(phone, wrongCode(phone)), status: 400, code: "wrong_code",
			check: attemptsLeft(4)},
		{name: "verify", method: "POST", path: "/otp/verify", bodyFn: verify(phone, lastCode(phone)), status: 200,
			check: func(t *testing.T, r response) {
				if got := r.json(t)["valid"]; got != true {
					t.Errorf("valid: got %v, want true", got)
				}
				if got := r.json(t)["verification_id"]; got != ids[phone] || ids[phone] == "" {
					t.Errorf("verification_id: got %v, want the send's %q", got, ids[phone])
				}
			}},
		// GET /otp/verifications/{id}, POST .../cancel
		{name: "verification approved", method: "GET", pathFn: verification(phone, ""), status: 200,
			check: verificationIs("approved", 2)},
		{name: "cancel an approved verification", method: "POST", pathFn: verification(phone, "/cancel"), status: 409, code: "verification_not_pending",
			check: func(t *testing.T, r response) {
				if got := r.json(t)["verification_status"]; got != "approved" {
					t.Errorf("verification_status: got %v, want approved", got)
				}
			}},
		{name: "verification unknown", method: "GET", path: "/otp/verifications/VE0123456789abcdef0123456789abcdef", status: 404, code: "verification_not_found"},
		{name: "verification malformed id", method: "GET", path: "/otp/verifications/nope", status: 404, code: "verification_not_found"},
		{name: "verification without key", method: "GET", path: "/otp/verifications/VE0123456789abcdef0123456789abcdef", key: noKey, status: 401, code: "unauthorized", badRequest: true},
		{name: "verification with ops key", method: "GET", path: "/otp/verifications/VE0123456789abcdef0123456789abcdef", key: opsKey, status: 403, code: "forbidden"},
		{name: "verification pending", method: "GET", pathFn: verification("+14155550106", ""), status: 200, check: verificationIs("pending", 0),
			before: sendFor("+14155550106")},
		{name: "cancel a pending verification", method: "POST", pathFn: verification("+14155550106", "/cancel"), status: 200, check: verificationIs("canceled", 0)},
		{name: "verify a canceled code", method: "POST", path: "/otp/verify", bodyFn: verify("+14155550106", lastCode("+14155550106")), status: 400, code: "no_active_code"},
		{name: "cancel unknown", method: "POST", path: "/otp/verifications/VE0123456789abcdef0123456789abcdef/cancel", status: 404, code: "verification_not_found"},
		{name: "verification max attempts reached", method: "GET", pathFn: verification("+14155550107", ""), status: 200, check: verificationIs("max_attempts_reached", 5),
			before: func(t *testing.T, e contractEnv) {
				sendFor("+14155550107")(t, e)
				for range 5 {
					if r := e.c.do(t, 0, "POST", "/otp/verify", verify("+14155550107", wrongCode("+14155550107"))(t, e)); r.Status != 400 {
						t.Fatalf("wrong guess: got %d, want 400: %s", r.Status, r.Body)
					}
				}
			}},
		{name: "verify used code", method: "POST", path: "/otp/verify", bodyFn: verify(phone, lastCode(phone)), status: 400, code: "no_active_code"},
		{name: "verify code with letters", method: "POST", path: "/otp/verify", body: `{"phone":"+14155550100","code":"12ab56"}`, status: 422, code: "invalid_code", badRequest: true},
		{name: "verify code of the wrong length", method: "POST", path: "/otp/verify", body: `{"phone":"+14155550100","code":"1234567"}`, status: 422, code: "invalid_code"},
		{name: "verify without code", method: "POST", path: "/otp/verify", body: `{"phone":"+14155550100"}`, status: 422, code: "invalid_code", badRequest: true},
		{name: "verify invalid phone", method: "POST", path: "/otp/verify", body: `{"phone":"12345","code":"123456"}`, status: 422, code: "invalid_phone"},
		{name: "verify unknown field", method: "POST", path: "/otp/verify", body: `{"phone":"+14155550100","code":"123456","otp":"1"}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "verify after too many wrong guesses", method: "POST", path: "/otp/verify", bodyFn: verify("+14155550104", lastCode("+14155550104")),
			status: 429, code: "too_many_attempts",
			before: func(t *testing.T, e contractEnv) {
				if r := e.c.do(t, 0, "POST", "/otp/send", `{"phone":"+14155550104"}`); r.Status != 200 {
					t.Fatalf("send: got %d, want 200: %s", r.Status, r.Body)
				}
				for range 5 {
					if r := e.c.do(t, 0, "POST", "/otp/verify", verify("+14155550104", wrongCode("+14155550104"))(t, e)); r.Status != 400 {
						t.Fatalf("wrong guess: got %d, want 400: %s", r.Status, r.Body)
					}
				}
			}},
		{name: "verify without key", method: "POST", path: "/otp/verify", key: noKey, body: `{"phone":"+14155550100","code":"123456"}`, status: 401, code: "unauthorized", badRequest: true},

		// POST /limits/check
		{name: "limits single", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1"}`, status: 200,
			check: func(t *testing.T, r response) {
				modes("exact")(t, r)
				header("RateLimit-Policy", `"default";q=50;w=10`)(t, r)
				header("RateLimit", `"default";r=49;t=1`)(t, r)
			}},
		{name: "limits single peek", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1","cost":0}`, status: 200,
			check: header("RateLimit-Policy", `"default";q=50;w=10`)},
		{name: "limits batch", method: "POST", path: "/limits/check",
			body:   `{"checks":[{"policy":"default","key":"user:2","cost":5},{"policy":"login","key":"user@example.com"},{"policy":"shadowed","key":"user:2"}]}`,
			status: 200, check: decisions("true", "true", "true/would true")},
		{name: "limits batch of 20", method: "POST", path: "/limits/check", body: batch(20), status: 200},
		{name: "limits shadow would deny", method: "POST", path: "/limits/check",
			body:   `{"checks":[{"policy":"shadowed","key":"s:1"},{"policy":"shadowed","key":"s:1"}]}`,
			status: 200, check: decisions("true/would true", "true/would false")},
		{name: "limits batch denied", method: "POST", path: "/limits/check",
			body:   `{"checks":[{"policy":"default","key":"user:3","cost":50},{"policy":"default","key":"user:3"}]}`,
			status: 429, check: decisions("true", "false")},
		{name: "limits denied batch spent nothing", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:3","cost":0}`, status: 200,
			check: header("RateLimit", `"default";r=50;t=0`)},
		{name: "limits fixed window denied", method: "POST", path: "/limits/check", body: `{"policy":"login","key":"user@example.com","cost":2}`, status: 429,
			check: header("RateLimit-Policy", `"login";q=2;w=60`)},
		{name: "limits fixed window denied again, from memory", method: "POST", path: "/limits/check", body: `{"policy":"login","key":"user@example.com","cost":2}`, status: 429,
			check: modes("memory")},
		{name: "limits unknown policy", method: "POST", path: "/limits/check", body: `{"policy":"nope","key":"user:1"}`, status: 404, code: "unknown_policy"},
		{name: "limits invalid key", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"bad key!"}`, status: 422, code: "invalid_key", badRequest: true},
		{name: "limits key too long", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"` + strings.Repeat("k", 129) + `"}`, status: 422, code: "invalid_key", badRequest: true},
		{name: "limits cost above capacity", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1","cost":51}`, status: 422, code: "invalid_cost"},
		{name: "limits negative cost", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1","cost":-1}`, status: 422, code: "invalid_cost", badRequest: true},
		{name: "limits fractional cost", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1","cost":1.5}`, status: 422, code: "invalid_cost", badRequest: true},
		{name: "limits inline and batch", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1","checks":[{"policy":"default","key":"user:1"}]}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "limits empty batch", method: "POST", path: "/limits/check", body: `{"checks":[]}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "limits batch of 21", method: "POST", path: "/limits/check", body: batch(21), status: 400, code: "invalid_request", badRequest: true},
		// Not badRequest: kin-openapi reads only the first JSON value, so it
		// cannot see the trailing data the server refuses.
		{name: "limits trailing data", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1"} {}`, status: 400, code: "invalid_request"},
		{name: "limits unknown field", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1","weight":2}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "limits with ops key", method: "POST", path: "/limits/check", key: opsKey, body: `{"policy":"default","key":"user:1"}`, status: 403, code: "forbidden"},

		// routes the spec does not have
		{name: "unknown route", method: "GET", path: "/nope", status: 404, code: "not_found", routeless: true},
		{name: "wrong method on an API route", method: "GET", path: "/otp/send", status: 405, code: "method_not_allowed", routeless: true},
		{name: "wrong method on a meta route", method: "DELETE", path: "/healthz", key: noKey, status: 405, code: "method_not_allowed", routeless: true},

		// Redis gone: the last cases, since they stop it
		{name: "readyz without redis", method: "GET", path: "/readyz", key: noKey, status: 503, code: "store_unavailable",
			before: func(t *testing.T, e contractEnv) { e.m.Close() },
			check:  header("Retry-After", "5")},
		{name: "send without redis", method: "POST", path: "/otp/send", body: `{"phone":"+14155550105"}`, status: 503, code: "store_unavailable",
			check: header("Retry-After", "60")},
		{name: "verify without redis", method: "POST", path: "/otp/verify", body: `{"phone":"+14155550105","code":"123456"}`, status: 503, code: "store_unavailable"},
		// The default policy is on_store_error: open, so production (and so
		// this harness, built by app.New) decides by the split limit.
		// Decided without Redis: the answer says so (mode fallback, not exact).
		{name: "limits without redis", method: "POST", path: "/limits/check", body: `{"policy":"default","key":"user:1"}`, status: 200,
			check: modes("fallback")},
	}

	opts := &openapi3filter.Options{
		AuthenticationFunc:    bearerAuthentication,
		IncludeResponseStatus: true, // a status the spec does not list fails
		MultiError:            true,
	}
	// Sequential: the cases build on each other (a code sent, then guessed).
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before(t, env)
			}
			if tc.after != nil {
				defer tc.after(t, env)
			}
			body := tc.body
			if tc.bodyFn != nil {
				body = tc.bodyFn(t, env)
			}
			key := tc.key
			switch key {
			case "":
				key = apiKey
			case noKey:
				key = ""
			}
			path := tc.path
			if tc.pathFn != nil {
				path = tc.pathFn(t, env)
			}
			res := c.doWith(t, 0, tc.method, path, body, key, tc.header)
			where := fmt.Sprintf("%s %s -> %d", tc.method, tc.path, res.Status)
			if res.Status != tc.status {
				t.Fatalf("%s: got status %d, want %d; body %s", where, res.Status, tc.status, res.Body)
			}

			req := httptest.NewRequest(tc.method, path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			route, params, err := router.FindRoute(req)
			switch {
			case tc.routeless && err == nil:
				t.Fatalf("%s: the spec has this operation, but the case says it does not", where)
			case tc.routeless:
				route = routelessRoute(doc, req)
			case err != nil:
				t.Fatalf("%s: the spec has no such operation: %v", where, err)
			}

			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
			if !tc.routeless {
				err := openapi3filter.ValidateRequest(context.Background(), in)
				switch {
				case tc.badRequest && err == nil:
					t.Errorf("%s: the request was meant to break the spec, but it validates", where)
				case !tc.badRequest && err != nil:
					t.Errorf("%s: the request does not match the spec: %v", where, err)
				}
			}

			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.Status, Header: res.Header, Options: opts}
			out.SetBodyBytes(res.Body)
			if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
				t.Errorf("%s: the response does not match the spec: %v\nbody: %s", where, err, res.Body)
			}
			checkUndocumented(t, where, route, res)
			checkProblem(t, where, tc.code, res)
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

// bearerAuthentication accepts what the spec's bearerAuth scheme asks for:
// an Authorization: Bearer header with a token. Whether the key is a known
// one is the server's business (401), not the spec's.
func bearerAuthentication(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	if s.Type != "http" || !strings.EqualFold(s.Scheme, "bearer") {
		return fmt.Errorf("unexpected security scheme %s (%s %s)", in.SecuritySchemeName, s.Type, s.Scheme)
	}
	scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return errors.New("no Authorization: Bearer <key>")
	}
	return nil
}

// routelessRoute is an operation holding the spec's answers to requests for
// no operation of it: unknown path, unknown method, body too large.
func routelessRoute(doc *openapi3.T, req *http.Request) *routers.Route {
	r := doc.Components.Responses
	return &routers.Route{
		Spec: doc, Path: req.URL.Path, Method: req.Method,
		Operation: &openapi3.Operation{Responses: openapi3.NewResponses(
			openapi3.WithStatus(http.StatusNotFound, r["NotFound"]),
			openapi3.WithStatus(http.StatusMethodNotAllowed, r["MethodNotAllowed"]),
			openapi3.WithStatus(http.StatusRequestEntityTooLarge, r["PayloadTooLarge"]),
		)},
	}
}

// checkProblem checks a problem body against the headers and status it came
// with, and its code against the one wanted.
func checkProblem(t *testing.T, where, wantCode string, res response) {
	t.Helper()
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	isProblem := mt == "application/problem+json"
	switch {
	case wantCode == "" && isProblem:
		t.Errorf("%s: got a problem, want none: %s", where, res.Body)
		return
	case wantCode == "":
		return
	case !isProblem:
		t.Errorf("%s: Content-Type %q, want application/problem+json", where, res.Header.Get("Content-Type"))
		return
	}
	var p httpx.Problem
	if err := json.Unmarshal(res.Body, &p); err != nil {
		t.Fatalf("%s: problem body: %v", where, err)
	}
	if p.Code != wantCode {
		t.Errorf("%s: code: got %q, want %q (detail %q)", where, p.Code, wantCode, p.Detail)
	}
	if want := "urn:otpguard:problem:" + p.Code; p.Type != want {
		t.Errorf("%s: type: got %q, want %q", where, p.Type, want)
	}
	if p.Status != res.Status {
		t.Errorf("%s: status in body: got %d, want the response's %d", where, p.Status, res.Status)
	}
	if got, want := p.RequestID, res.Header.Get(echo.HeaderXRequestID); got != want {
		t.Errorf("%s: request_id: got %q, want X-Request-Id %q", where, got, want)
	}
	ra := res.Header.Get("Retry-After")
	switch {
	case p.RetryAfter == nil && ra != "":
		t.Errorf("%s: Retry-After %q without retry_after in the body", where, ra)
	case p.RetryAfter != nil && ra != strconv.Itoa(*p.RetryAfter):
		t.Errorf("%s: retry_after %d, but Retry-After %q", where, *p.RetryAfter, ra)
	}
}

// checkUndocumented reports JSON members the spec does not name: the spec's
// schemas are open (clients ignore unknown members), so ValidateResponse
// alone would let an undocumented field through.
func checkUndocumented(t *testing.T, where string, route *routers.Route, res response) {
	t.Helper()
	ref := route.Operation.Responses.Status(res.Status)
	if ref == nil || ref.Value == nil {
		return
	}
	mt := ref.Value.Content.Get(res.Header.Get("Content-Type"))
	if mt == nil || mt.Schema == nil || !strings.Contains(res.Header.Get("Content-Type"), "json") {
		return
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(res.Body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil && err != io.EOF {
		t.Errorf("%s: body is not JSON: %v", where, err)
		return
	}
	for _, path := range undocumented(mt.Schema, v, "body") {
		t.Errorf("%s: %s is not in the spec", where, path)
	}
}

func undocumented(s *openapi3.SchemaRef, v any, at string) []string {
	if s == nil || s.Value == nil {
		return nil
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props := spectest.Properties(s.Value)
		// A map (additionalProperties: a schema) documents every key.
		extra := s.Value.AdditionalProperties.Schema
		for name, val := range v {
			p, ok := props[name]
			if !ok && extra != nil {
				p, ok = extra, true
			}
			if !ok {
				out = append(out, at+"."+name)
				continue
			}
			out = append(out, undocumented(p, val, at+"."+name)...)
		}
	case []any:
		items := spectest.Items(s.Value)
		for i, val := range v {
			out = append(out, undocumented(items, val, fmt.Sprintf("%s[%d]", at, i))...)
		}
	}
	slices.Sort(out)
	return out
}
