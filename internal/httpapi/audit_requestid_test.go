package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
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

// TestAuditEventsCarryTheRequestID: a 429 in an app's logs (its problem
// body's request_id) is found in the audit trail, on SQLite and
// PostgreSQL: the send's event and an ops action's carry the request's
// X-Request-Id, /ops/events filters by it, and the ops page shows it.
func TestAuditEventsCarryTheRequestID(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			oc := newOpsCluster(t, opsConfig{instances: 2, engine: engine})
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
