package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// doWithID sends a request to instance i with the key and an X-Request-Id
// of the caller's, as an app that follows its requests across services
// does.
func (c *cluster) doWithID(t *testing.T, i int, method, path, body, key, id string) response {
	t.Helper()
	req, err := http.NewRequest(method, c.instances[i].srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// requestWithID sends a request to instance i with an X-Request-Id and
// headers, and answers the first response (a redirect is not followed).
func (c *cluster) requestWithID(t *testing.T, i int, method, path, body, id string, headers map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, c.instances[i].srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Request-Id", id)
	client := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// formWithID posts an HTML form to instance i, with the ops key when key
// is not empty.
func (c *cluster) formWithID(t *testing.T, i int, path, form, key, id string) response {
	t.Helper()
	h := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	return c.requestWithID(t, i, "POST", path, form, id, h)
}

// TestAuditEventsCarryTheRequestID: a 429 in an app's logs (its problem
// body's request_id) is found in the audit trail, on SQLite and
// PostgreSQL: the send's event and an ops action's carry the request's
// X-Request-Id, /ops/events filters by it, and the ops page shows it.
// Every route that records an event carries it: the overrides (JSON and
// the page's forms), sign-ins right and wrong (the form, a wrong ops key
// on any ops route) and the lock-out of wrong API keys.
func TestAuditEventsCarryTheRequestID(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			// One wrong API key locks an address out (audited); the test's
			// X-Forwarded-For names the address, so only that one is.
			oc := newOpsCluster(t, opsConfig{instances: 2, engine: engine, trustProxies: loopback,
				apiKeys: ops.SignInLimit{Failures: 1, Window: time.Minute}})
			if r := oc.doWithID(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`, apiKey, "app-req-0001"); r.Status != 200 {
				t.Fatalf("send: %d %s", r.Status, r.Body)
			}
			refused := oc.doWithID(t, 1, "POST", "/otp/send", `{"phone":"`+phone+`"}`, apiKey, "app-req-0002")
			if refused.Status != 429 {
				t.Fatalf("second send: %d %s, want 429", refused.Status, refused.Body)
			}
			// What the app logged: the problem body's request_id.
			id, _ := refused.json(t)["request_id"].(string)
			if id != "app-req-0002" {
				t.Fatalf("problem request_id %q, want the caller's app-req-0002", id)
			}
			unblock := oc.doWithID(t, 0, "DELETE", "/ops/blocked/"+pathPhone(phone), "", opsKey, "ops-req-0003")
			if unblock.Status != 200 {
				t.Fatalf("unblock: %d %s", unblock.Status, unblock.Body)
			}
			opsRequests := opsActionsWithIDs(t, oc)
			// A generated ID is recorded as well.
			gen := oc.do(t, 0, "POST", "/otp/send", `{"phone":"+919800000001"}`)
			genID := gen.Header.Get("X-Request-Id")
			if gen.Status != 200 || genID == "" {
				t.Fatalf("send: %d, X-Request-Id %q", gen.Status, genID)
			}

			opsWait(t, "the events in SQL", func() bool {
				return len(oc.eventsIn(t, phone)) >= 3 && len(oc.eventsIn(t, "+919800000001")) >= 1
			})
			ids := map[string]guard.Event{}
			for _, e := range append(oc.eventsIn(t, phone), oc.eventsIn(t, "+919800000001")...) {
				ids[e.RequestID] = e
			}
			for id, want := range map[string]string{
				"app-req-0001": "sent", "app-req-0002": "cooldown", "ops-req-0003": "unblocked", genID: "sent",
			} {
				if e, ok := ids[id]; !ok || e.Outcome != want {
					t.Errorf("event of request %s: %+v (found %v), want outcome %s", id, e, ok, want)
				}
			}

			// The ops actions' events, by request ID, once all are in SQL (or
			// after 10 s: what is missing is then named below).
			var got map[string]string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				got = map[string]string{}
				for _, e := range auditEvents(t, oc) {
					if strings.HasPrefix(e.Action, "ops.") || e.Action == ops.ActionAPIKeys {
						got[e.RequestID] = e.Action + " " + e.Outcome
					}
				}
				n := 0
				for id := range opsRequests {
					if _, ok := got[id]; ok {
						n++
					}
				}
				if n == len(opsRequests) || time.Now().After(deadline) {
					break
				}
			}
			for id, want := range opsRequests {
				if got[id] != want {
					t.Errorf("event of request %s: %q, want %q", id, got[id], want)
				}
			}
			if e, ok := got[""]; ok {
				t.Errorf("an ops event without a request ID: %s", e)
			}

			// The audit API finds the refusal by the ID alone.
			r := oc.ops(t, 1, "GET", "/ops/events?request_id=app-req-0002", "")
			var page struct {
				Events []struct {
					RequestID string `json:"request_id"`
					Action    string `json:"action"`
					Outcome   string `json:"outcome"`
					Phone     string `json:"phone"`
				} `json:"events"`
			}
			if err := json.Unmarshal(r.Body, &page); r.Status != 200 || err != nil {
				t.Fatalf("GET /ops/events?request_id: %d %s", r.Status, r.Body)
			}
			if len(page.Events) != 1 || page.Events[0].RequestID != "app-req-0002" || page.Events[0].Outcome != "cooldown" ||
				page.Events[0].Action != guard.ActionOTPSend || page.Events[0].Phone != phone {
				t.Errorf("events of app-req-0002: %+v, want the one refused send", page.Events)
			}
			if r := oc.ops(t, 0, "GET", "/ops/events?request_id=bad%20id", ""); r.Status != 400 {
				t.Errorf("a request_id that no X-Request-Id can be: %d, want 400", r.Status)
			}
			// The ops page shows it beside the event.
			p := oc.ops(t, 0, "GET", "/ops", "")
			if p.Status != 200 || !strings.Contains(string(p.Body), "app-req-0002") {
				t.Errorf("the ops page (%d) does not show request app-req-0002", p.Status)
			}
		})
	}
}

// opsActionsWithIDs takes the ops actions that record an event, each with
// an X-Request-Id of its own, and returns the event each should have
// recorded ("action outcome") by request ID.
func opsActionsWithIDs(t *testing.T, oc *opsCluster) map[string]string {
	t.Helper()
	expect := func(r response, status int, what string) response {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: %d %s, want %d", what, r.Status, r.Body, status)
		}
		return r
	}
	jsonKey := map[string]string{"Authorization": "Bearer " + opsKey, "Content-Type": "application/json"}
	added := expect(oc.requestWithID(t, 0, "POST", "/ops/overrides", `{"kind":"country_pause","subject":"NG","reason":"wave"}`, "ops-req-0101", jsonKey),
		http.StatusCreated, "add an override")
	id := fmt.Sprint(added.json(t)["id"])
	expect(oc.requestWithID(t, 1, "DELETE", "/ops/overrides/"+id, "", "ops-req-0102", jsonKey), http.StatusNoContent, "remove the override")
	// The page's forms.
	expect(oc.formWithID(t, 0, "/ops/actions/override", "kind=country_pause&subject=GH&reason=wave&expires_in=1h", opsKey, "ops-req-0103"),
		http.StatusSeeOther, "the override form")
	list := oc.ops(t, 0, "GET", "/ops/overrides", "").json(t)["overrides"].([]any)
	if len(list) != 1 {
		t.Fatalf("overrides after the form: %v, want one", list)
	}
	formID := fmt.Sprint(list[0].(map[string]any)["id"])
	expect(oc.formWithID(t, 1, "/ops/actions/unoverride", "id="+formID+"&confirmed=1", opsKey, "ops-req-0104"),
		http.StatusSeeOther, "the override's remove button")
	// Sign-ins: the form, right and wrong; a wrong ops key on an ops route.
	expect(oc.formWithID(t, 1, "/ops/login", "key="+opsKey, "", "ops-req-0105"), http.StatusSeeOther, "sign in")
	expect(oc.formWithID(t, 0, "/ops/login", "key=ogo_not-the-key-0123456789", "", "ops-req-0106"), http.StatusUnauthorized, "a wrong key")
	expect(oc.requestWithID(t, 1, "GET", "/ops/events", "", "ops-req-0107", map[string]string{"Authorization": "Bearer ogo_not-the-key-0123456789"}),
		http.StatusUnauthorized, "a wrong ops key on the API")
	// The wrong API key that locks its address out.
	expect(oc.requestWithID(t, 0, "POST", "/limits/check", `{"policy":"default","key":"k","cost":0}`, "app-req-0108",
		map[string]string{"Authorization": "Bearer not-a-key-0123456789", "Content-Type": "application/json", "X-Forwarded-For": "203.0.113.77"}),
		http.StatusUnauthorized, "a wrong API key")
	return map[string]string{
		"ops-req-0101": ops.ActionOverrideAdd + " " + ops.OutcomeAdded,
		"ops-req-0102": ops.ActionOverrideRemove + " " + ops.OutcomeRemoved,
		"ops-req-0103": ops.ActionOverrideAdd + " " + ops.OutcomeAdded,
		"ops-req-0104": ops.ActionOverrideRemove + " " + ops.OutcomeRemoved,
		"ops-req-0105": ops.ActionLogin + " " + ops.OutcomeOK,
		"ops-req-0106": ops.ActionLogin + " " + ops.OutcomeFailed,
		"ops-req-0107": ops.ActionLogin + " " + ops.OutcomeFailed,
		"app-req-0108": ops.ActionAPIKeys + " " + ops.OutcomeLockedOut,
	}
}
