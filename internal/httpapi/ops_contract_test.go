package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// opsAuthentication accepts what the ops schemes ask for: a bearer token
// (opsKey, bearerAuth) or the session cookie (opsSession). Whether the key
// is right is the server's business.
func opsAuthentication(ctx context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	if s.Type == "apiKey" && s.In == "cookie" {
		if _, err := in.RequestValidationInput.Request.Cookie(s.Name); err != nil {
			return fmt.Errorf("no %s cookie", s.Name)
		}
		return nil
	}
	return bearerAuthentication(ctx, in)
}

// TestOpsContract holds real requests to every ops route, and their
// responses, to api/openapi.yaml.
func TestOpsContract(t *testing.T) {
	doc := loadSpec(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Two wrong keys from one address are allowed: the last cases spend
	// them and meet the limit.
	// A daily budget, for the override that would loosen it.
	pol := defaults()
	pol.OTP.Budget.PerDay = 1000
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, signIn: ops.SignInLimit{Failures: 2, Window: time.Minute}, policies: &pol})
	oc.send(t, 0, "+14155550100")
	oc.send(t, 0, "+14155550100") // cooldown: a block to list
	// The attack view holds these sends (a real answer, not an empty one).
	if err := oc.instances[0].app.FlushAbuse(context.Background()); err != nil {
		t.Fatal(err)
	}
	form := "application/x-www-form-urlencoded"

	cases := []struct {
		name, method, path, body, contentType string
		key                                   string // "" sends the ops key; noKey none
		status                                int
		code                                  string
		badRequest                            bool // the request breaks the spec on purpose
	}{
		{name: "blocked", method: "GET", path: "/ops/blocked", status: 200},
		{name: "blocked filtered", method: "GET", path: "/ops/blocked?phone=%2B1415&country=US&limit=10&offset=0", status: 200},
		{name: "blocked bad limit", method: "GET", path: "/ops/blocked?limit=9999", status: 400, code: "invalid_request", badRequest: true},
		{name: "blocked bad country", method: "GET", path: "/ops/blocked?country=USA", status: 400, code: "invalid_request", badRequest: true},
		{name: "blocked bad phone", method: "GET", path: "/ops/blocked?phone=abc", status: 400, code: "invalid_request"},
		{name: "blocked without key", method: "GET", path: "/ops/blocked", key: noKey, status: 401, code: "unauthorized", badRequest: true},
		{name: "blocked with API key", method: "GET", path: "/ops/blocked", key: apiKey, status: 403, code: "forbidden"},
		{name: "number", method: "GET", path: "/ops/numbers/%2B14155550100", status: 200},
		{name: "number spelled", method: "GET", path: "/ops/numbers/+1%20(415)%20555-0100", status: 200},
		{name: "number unknown", method: "GET", path: "/ops/numbers/%2B14155550109", status: 200},
		{name: "number invalid", method: "GET", path: "/ops/numbers/12345", status: 422, code: "invalid_phone"},
		{name: "number with API key", method: "GET", path: "/ops/numbers/%2B14155550100", key: apiKey, status: 403, code: "forbidden"},
		{name: "page search", method: "GET", path: "/ops?q=%2B14155550100", status: 200},
		{name: "form trust", method: "POST", path: "/ops/actions/trust", contentType: form, body: "phone=%2B14155550102&back_q=%2B14155550102", status: 303},
		{name: "deny add", method: "POST", path: "/ops/denylist", body: `{"pattern":"+88213","reason":"fraud","expires_in":600}`, status: 201},
		{name: "deny add at", method: "POST", path: "/ops/denylist", body: `{"pattern":"+1415555","expires_at":"` + time.Now().AddDate(1, 0, 0).UTC().Format(time.RFC3339) + `"}`, status: 201},
		{name: "deny add invalid", method: "POST", path: "/ops/denylist", body: `{"pattern":"88213"}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "deny add unknown field", method: "POST", path: "/ops/denylist", body: `{"pattern":"+1","by":"me"}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "deny add control character", method: "POST", path: "/ops/denylist", body: `{"pattern":"+88215","reason":"a\u0000b"}`, status: 400, code: "invalid_request"},
		{name: "deny add bidi control", method: "POST", path: "/ops/denylist", body: `{"pattern":"+88215","reason":"a\u202eb"}`, status: 400, code: "invalid_request"},
		{name: "deny list", method: "GET", path: "/ops/denylist", status: 200},
		{name: "blocked with deny entries", method: "GET", path: "/ops/blocked", status: 200},
		{name: "unblock", method: "DELETE", path: "/ops/blocked/%2B14155550100", status: 200},
		{name: "unblock denied number", method: "DELETE", path: "/ops/blocked/+14155550101", status: 200},
		{name: "unblock invalid", method: "DELETE", path: "/ops/blocked/12345", status: 422, code: "invalid_phone"},
		{name: "deny remove", method: "DELETE", path: "/ops/denylist/1", status: 204},
		{name: "deny remove missing", method: "DELETE", path: "/ops/denylist/99", status: 404, code: "not_found"},
		{name: "deny remove bad id", method: "DELETE", path: "/ops/denylist/abc", status: 400, code: "invalid_request", badRequest: true},
		{name: "events", method: "GET", path: "/ops/events?limit=5", status: 200},
		{name: "events filtered", method: "GET", path: "/ops/events?phone=%2B14155550100&action=otp.send&since=2020-01-01T00:00:00Z&until=2099-01-01T00:00:00Z&before_id=1000", status: 200},
		{name: "events bad time", method: "GET", path: "/ops/events?since=yesterday", status: 400, code: "invalid_request", badRequest: true},
		{name: "events bad action", method: "GET", path: "/ops/events?action=otp.send%00", status: 400, code: "invalid_request"},
		{name: "events bad phone", method: "GET", path: "/ops/events?phone=12345", status: 422, code: "invalid_phone"},
		{name: "override pause", method: "POST", path: "/ops/overrides", body: `{"kind":"country_pause","subject":"ng","reason":"pumping wave","expires_in":3600}`, status: 201},
		{name: "override budget", method: "POST", path: "/ops/overrides", body: `{"kind":"budget_per_day","limit":200,"reason":"spend"}`, status: 201},
		{name: "override prefix", method: "POST", path: "/ops/overrides", body: `{"kind":"prefix_limit","subject":"+2348031","limit":5,"reason":"range","expires_in":600}`, status: 201},
		{name: "override looser", method: "POST", path: "/ops/overrides", body: `{"kind":"budget_per_day","limit":5000,"reason":"oops"}`, status: 422, code: "override_looser"},
		{name: "override bad kind", method: "POST", path: "/ops/overrides", body: `{"kind":"country_boost","subject":"NG","limit":1,"reason":"x"}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "override bad subject", method: "POST", path: "/ops/overrides", body: `{"kind":"country_limit","subject":"Nigeria","limit":1,"reason":"x"}`, status: 400, code: "invalid_request"},
		{name: "override no reason", method: "POST", path: "/ops/overrides", body: `{"kind":"budget_per_hour","limit":1,"reason":" "}`, status: 400, code: "invalid_request"},
		{name: "override too long", method: "POST", path: "/ops/overrides", body: `{"kind":"budget_per_hour","limit":1,"reason":"x","expires_in":999999}`, status: 400, code: "invalid_request", badRequest: true},
		{name: "overrides", method: "GET", path: "/ops/overrides", status: 200},
		{name: "override remove", method: "DELETE", path: "/ops/overrides/2", status: 204},
		{name: "override remove missing", method: "DELETE", path: "/ops/overrides/99", status: 404, code: "not_found"},
		{name: "form override", method: "POST", path: "/ops/actions/override", contentType: form, body: "kind=country_limit&subject=GH&limit=10&expires_in=2h&reason=wave", status: 303},
		{name: "form override refused", method: "POST", path: "/ops/actions/override", contentType: form, body: "kind=country_limit&subject=GH&limit=ten&reason=wave", status: 303},
		{name: "form unoverride asks first", method: "POST", path: "/ops/actions/unoverride", contentType: form, body: "id=1", status: 200},
		{name: "form unoverride", method: "POST", path: "/ops/actions/unoverride", contentType: form, body: "id=1&confirmed=1", status: 303},
		{name: "abuse", method: "GET", path: "/ops/abuse", status: 200},
		{name: "abuse top", method: "GET", path: "/ops/abuse?top=3", status: 200},
		{name: "abuse bad top", method: "GET", path: "/ops/abuse?top=51", status: 400, code: "invalid_request", badRequest: true},
		{name: "abuse with API key", method: "GET", path: "/ops/abuse", key: apiKey, status: 403, code: "forbidden"},
		{name: "services", method: "GET", path: "/ops/services", status: 200},
		{name: "services without key", method: "GET", path: "/ops/services", key: noKey, status: 401, code: "unauthorized", badRequest: true},
		{name: "services with API key", method: "GET", path: "/ops/services", key: apiKey, status: 403, code: "forbidden"},
		{name: "events of a service", method: "GET", path: "/ops/events?service=VA0123456789abcdef0123456789abcdef", status: 200},
		{name: "page events of a service", method: "GET", path: "/ops?service=VA0123456789abcdef0123456789abcdef", status: 200},
		{name: "events of the default service", method: "GET", path: "/ops/events?service=default", status: 200},
		{name: "page events of the default service", method: "GET", path: "/ops?service=default", status: 200},
		{name: "page", method: "GET", path: "/ops", status: 200},
		{name: "page without key", method: "GET", path: "/ops", key: noKey, status: 303, badRequest: true},
		{name: "page with API key", method: "GET", path: "/ops", key: apiKey, status: 403, code: "forbidden"},
		{name: "login form", method: "GET", path: "/ops/login", key: noKey, status: 200},
		{name: "login", method: "POST", path: "/ops/login", contentType: form, body: "key=" + url.QueryEscape(opsKey), key: noKey, status: 303},
		{name: "login wrong key", method: "POST", path: "/ops/login", contentType: form, body: "key=nope", key: noKey, status: 401},
		{name: "login API key", method: "POST", path: "/ops/login", contentType: form, body: "key=" + apiKey, key: noKey, status: 403},
		{name: "form unblock asks first", method: "POST", path: "/ops/actions/unblock", contentType: form, body: "phone=%2B14155550100", status: 200},
		{name: "form unblock", method: "POST", path: "/ops/actions/unblock", contentType: form, body: "phone=%2B14155550100&confirmed=1", status: 303},
		{name: "form deny", method: "POST", path: "/ops/actions/deny", contentType: form, body: "pattern=%2B88214&reason=x&expires_in=1h", status: 303},
		{name: "form deny bad field", method: "POST", path: "/ops/actions/deny", contentType: form, body: "pattern=%2B88214&expires_in=soon", status: 400},
		{name: "form deny a country asks first", method: "POST", path: "/ops/actions/deny", contentType: form, body: "pattern=%2B1", status: 400},
		{name: "form deny a country confirmed", method: "POST", path: "/ops/actions/deny", contentType: form, body: "pattern=%2B1&confirm_country=yes&expires_in=1m", status: 303},
		{name: "form undeny asks first", method: "POST", path: "/ops/actions/undeny", contentType: form, body: "id=2", status: 200},
		{name: "form undeny", method: "POST", path: "/ops/actions/undeny", contentType: form, body: "id=2&confirmed=1", status: 303},
		{name: "form trust import", method: "POST", path: "/ops/actions/trust-import", contentType: form, body: "numbers=%2B447400123456%0A%2B447400123457", status: 303},
		{name: "form without key", method: "POST", path: "/ops/actions/undeny", contentType: form, body: "id=2", key: noKey, status: 303, badRequest: true},
		{name: "logout", method: "POST", path: "/ops/logout", contentType: form, body: "", status: 303},
		// "login wrong key" spent one failure; this is the second, the last.
		{name: "blocked with a wrong key", method: "GET", path: "/ops/blocked", key: "not-a-key-0123456789", status: 401, code: "unauthorized"},
		{name: "blocked past the sign-in limit", method: "GET", path: "/ops/blocked", status: 429, code: "too_many_attempts"},
		{name: "login past the sign-in limit", method: "POST", path: "/ops/login", contentType: form, body: "key=" + url.QueryEscape(opsKey), key: noKey, status: 429},
	}
	opts := &openapi3filter.Options{AuthenticationFunc: opsAuthentication, IncludeResponseStatus: true, MultiError: true}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			switch key {
			case "":
				key = opsKey
			case noKey:
				key = ""
			}
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			newReq := func(target string) *http.Request {
				req := httptest.NewRequest(tc.method, target, strings.NewReader(tc.body))
				req.RequestURI = ""
				req.Header.Set("Content-Type", ct)
				if key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				return req
			}
			res, err := noRedirects.Do(newReq(oc.instances[0].srv.URL + tc.path))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			r := response{Status: res.StatusCode, Header: res.Header, Body: body}
			where := fmt.Sprintf("%s %s -> %d", tc.method, tc.path, r.Status)
			if r.Status != tc.status {
				t.Fatalf("%s: want %d; body %s", where, tc.status, body)
			}

			req := newReq(tc.path)
			route, params, err := router.FindRoute(req)
			if err != nil {
				t.Fatalf("%s: the spec has no such operation: %v", where, err)
			}
			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
			err = openapi3filter.ValidateRequest(context.Background(), in)
			switch {
			case tc.badRequest && err == nil:
				t.Errorf("%s: the request was meant to break the spec, but it validates", where)
			case !tc.badRequest && err != nil:
				t.Errorf("%s: the request does not match the spec: %v", where, err)
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.Status, Header: r.Header, Options: opts}
			if strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
				// kin-openapi cannot decode HTML: the page is held to the
				// spec by its status, headers and content type.
				o := *opts
				o.ExcludeResponseBody = true
				out.Options = &o
			}
			out.SetBodyBytes(r.Body)
			if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
				t.Errorf("%s: the response does not match the spec: %v\nbody: %.500s", where, err, r.Body)
			}
			checkUndocumented(t, where, route, r)
			checkProblem(t, where, tc.code, r)
		})
	}
}
