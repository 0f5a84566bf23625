package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// engines is every SQL engine the ops tests run on.
var engines = []string{sqlstore.EngineSQLite, sqlstore.EnginePostgres}

type blockedBody struct {
	Blocks []struct {
		Phone       string     `json:"phone"`
		Country     string     `json:"country"`
		Reason      string     `json:"reason"`
		Count       int64      `json:"count"`
		Since       time.Time  `json:"since"`
		Until       *time.Time `json:"until"`
		SecondsLeft *int64     `json:"seconds_left"`
		DenyID      int64      `json:"deny_id"`
		Note        string     `json:"note"`
		Author      string     `json:"author"`
	} `json:"blocks"`
	Total int `json:"total"`
}

func blockedList(t *testing.T, oc *opsCluster, i int, query string) blockedBody {
	t.Helper()
	r := oc.ops(t, i, "GET", "/ops/blocked"+query, "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/blocked%s: %d %s", query, r.Status, r.Body)
	}
	var b blockedBody
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func reasons(b blockedBody) []string {
	var out []string
	for _, x := range b.Blocks {
		out = append(out, fmt.Sprintf("%s %s %d", x.Phone, x.Reason, x.Count))
	}
	return out
}

// TestOpsNewCodeEndsLockout: a number locked out by wrong guesses leaves
// the blocked list when a new code is sent (the lock-out is over).
func TestOpsNewCodeEndsLockout(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, policies: &p})
	const phone = "+447400123456"
	if status, _ := oc.send(t, 0, phone); status != 200 {
		t.Fatalf("send: %d", status)
	}
	wrong := "000000"
	if oc.out.LastCode(t, phone) == wrong {
		wrong = "111111"
	}
	for range p.OTP.MaxVerifyAttempts {
		oc.do(t, 1, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+wrong+`"}`)
	}
	if got := reasons(blockedList(t, oc, 0, "")); len(got) != 1 || !strings.HasPrefix(got[0], phone+" too_many_attempts") {
		t.Fatalf("after the lock-out: blocked %v, want %s too_many_attempts", got, phone)
	}
	if status, _ := oc.send(t, 1, phone); status != 200 {
		t.Fatalf("new code: %d", status)
	}
	if got := reasons(blockedList(t, oc, 0, "")); len(got) != 0 {
		t.Fatalf("after a new code: blocked %v, want none", got)
	}
}

// TestOpsBlockedAfterRealSends: real sends and guesses through the API on
// two instances, and the blocked list of either shows who is refused, why
// and until when.
func TestOpsBlockedAfterRealSends(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = time.Minute
	p.OTP.PerPhone = guard.Window{Limit: 2, Window: time.Hour}
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, policies: &p})

	// +14155550100: a second send within the cooldown.
	if status, _ := oc.send(t, 0, "+14155550100"); status != 200 {
		t.Fatalf("first send: %d", status)
	}
	if _, code := oc.send(t, 1, "+14155550100"); code != "cooldown" {
		t.Fatalf("second send: %q, want cooldown", code)
	}
	// +919800000000: over its per-number limit (2 an hour). Between sends
	// the test deletes the cooldown, so that the per-number counter refuses.
	liftCooldown := func() {
		oc.instances[0].rdb.Del(context.Background(), oc.prefix+"otp:{+919800000000}:cooldown")
	}
	for i := range 2 {
		if status, code := oc.send(t, i, "+919800000000"); status != 200 {
			t.Fatalf("send %d: %d %s", i+1, status, code)
		}
		liftCooldown()
	}
	if _, code := oc.send(t, 1, "+91 98000 00000"); code != "phone_rate_limited" {
		t.Fatalf("third send: %q, want phone_rate_limited", code)
	}
	// +447400123456: locked out by wrong guesses.
	if status, _ := oc.send(t, 0, "+447400123456"); status != 200 {
		t.Fatalf("send: %d", status)
	}
	wrong := "000000"
	if oc.out.LastCode(t, "+447400123456") == wrong {
		wrong = "111111"
	}
	for range 5 {
		oc.do(t, 1, "POST", "/otp/verify", `{"phone":"+447400123456","code":"`+wrong+`"}`)
	}

	for i := range oc.instances {
		b := blockedList(t, oc, i, "")
		want := []string{"+447400123456 too_many_attempts 5", "+919800000000 phone_rate_limited 3", "+14155550100 cooldown 2"}
		if diff := cmp.Diff(want, reasons(b)); diff != "" || b.Total != 3 {
			t.Errorf("instance %d: blocked (-want +got):\n%s\ntotal %d, want 3", i, diff, b.Total)
		}
		for _, x := range b.Blocks {
			if x.Until == nil || x.SecondsLeft == nil || *x.SecondsLeft <= 0 || x.Until.Before(time.Now()) {
				t.Errorf("%s: until %v, seconds_left %v; want a future end", x.Phone, x.Until, x.SecondsLeft)
			}
		}
		if got := b.Blocks[1]; got.Country != "IN" || *got.SecondsLeft < 3500 {
			t.Errorf("per-number block: country %q, %ds left; want IN and about an hour", got.Country, *got.SecondsLeft)
		}
	}
	if diff := cmp.Diff([]string{"+919800000000 phone_rate_limited 3"}, reasons(blockedList(t, oc, 0, "?country=IN"))); diff != "" {
		t.Errorf("country=IN (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"+14155550100 cooldown 2"}, reasons(blockedList(t, oc, 0, "?phone=%2B1415"))); diff != "" {
		t.Errorf("phone=+1415 (-want +got):\n%s", diff)
	}
	if b := blockedList(t, oc, 0, "?limit=1&offset=1"); len(b.Blocks) != 1 || b.Blocks[0].Phone != "+919800000000" || b.Total != 3 {
		t.Errorf("page 2 of size 1: %v of %d", reasons(b), b.Total)
	}
}

// TestOpsUnblockLetsNumberSendAgain: after DELETE /ops/blocked/{phone} a
// number in cooldown, over its limit or locked out gets a code at once,
// and the unblock is audited with the ops actor.
func TestOpsUnblockLetsNumberSendAgain(t *testing.T) {
	p := defaults()
	p.OTP.PerPhone = guard.Window{Limit: 1, Window: time.Hour}
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, policies: &p})
	const phone = "+919800000000"

	if status, _ := oc.send(t, 0, phone); status != 200 {
		t.Fatalf("send: %d", status)
	}
	if _, code := oc.send(t, 1, phone); code != "cooldown" {
		t.Fatalf("second send: %q, want cooldown", code)
	}
	r := oc.ops(t, 1, "DELETE", "/ops/blocked/"+pathPhone(phone), "")
	if r.Status != 200 || r.json(t)["phone"] != phone || r.json(t)["status"] != "unblocked" {
		t.Fatalf("unblock: %d %s", r.Status, r.Body)
	}
	if b := blockedList(t, oc, 0, ""); b.Total != 0 {
		t.Errorf("blocked after unblock: %v", reasons(b))
	}
	// Both the cooldown and the per-number limit (1 an hour) are lifted.
	if status, code := oc.send(t, 0, phone); status != 200 {
		t.Fatalf("send after unblock: %d %s, want 200", status, code)
	}
	code := oc.out.LastCode(t, phone)

	// A verify lock-out is lifted too: the number gets a fresh code.
	for range 5 {
		oc.do(t, 0, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+map[bool]string{true: "111111", false: "000000"}[code == "000000"]+`"}`)
	}
	if r := oc.do(t, 0, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+code+`"}`); r.Status != 429 {
		t.Fatalf("right code after 5 wrong guesses: %d, want 429", r.Status)
	}
	// A plain + in the path works as well as %2B.
	if r := oc.ops(t, 0, "DELETE", "/ops/blocked/"+phone, ""); r.Status != 200 {
		t.Fatalf("unblock: %d %s", r.Status, r.Body)
	}
	if status, code := oc.send(t, 1, phone); status != 200 {
		t.Fatalf("send after the second unblock: %d %s", status, code)
	}
	if r := oc.do(t, 1, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`); r.Status != 200 {
		t.Fatalf("verify the new code: %d %s", r.Status, r.Body)
	}

	// The audit queue writes in the background: wait for both.
	var unblocks []guard.Event
	opsWait(t, "the 2 unblock events written", func() bool {
		unblocks = nil
		for _, e := range oc.eventsIn(t, phone) {
			if e.Action == ops.ActionUnblock {
				unblocks = append(unblocks, e)
			}
		}
		return len(unblocks) >= 2
	})
	if len(unblocks) != 2 || unblocks[0].Actor == "" || unblocks[0].Actor == opsKey || unblocks[0].Outcome != "unblocked" {
		t.Errorf("unblock events: %+v; want 2 with the ops actor (never the key)", unblocks)
	}

	if r := oc.ops(t, 0, "DELETE", "/ops/blocked/12345", ""); r.Status != 422 {
		t.Errorf("unblock an invalid number: %d, want 422", r.Status)
	}
}

// TestOpsDenyListPropagates: a number and a prefix deny-listed on one
// instance are refused by the other within its refresh interval, with 403
// denied and no counter spent; removal is enforced the same way.
func TestOpsDenyListPropagates(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			oc := newOpsCluster(t, opsConfig{instances: 2, engine: engine})
			for _, tc := range []struct {
				name, pattern, phone string
			}{
				{"number", "+919800000000", "+919800000000"},
				{"prefix", "+4474001", "+447400123456"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r := oc.ops(t, 0, "POST", "/ops/denylist", `{"pattern":"`+tc.pattern+`","reason":"fraud wave","expires_in":3600}`)
					if r.Status != http.StatusCreated {
						t.Fatalf("add: %d %s", r.Status, r.Body)
					}
					entry := r.json(t)
					if entry["author"] == "" || entry["author"] == opsKey || entry["expires_at"] == nil {
						t.Errorf("entry: %v; want the actor as author and an expiry", entry)
					}
					// Instance 0 enforces it at once; instance 1 within its refresh.
					if _, code := oc.send(t, 0, tc.phone); code != "denied" {
						t.Errorf("send on the instance that added it: %q, want denied", code)
					}
					// Poll instance 1's cache, not its API: a send before
					// the refresh would rightly go out and spend counters.
					start := time.Now()
					opsWait(t, "instance 1 to enforce the entry", func() bool {
						_, ok := oc.nodes[1].deny.Denied(tc.phone, time.Now())
						return ok
					})
					t.Logf("instance 1 enforced the entry after %s", time.Since(start).Round(time.Millisecond))
					if status, code := oc.send(t, 1, tc.phone); status != http.StatusForbidden || code != "denied" {
						t.Errorf("send on instance 1: %d %q, want 403 denied", status, code)
					}
					// No counter was spent by the refused sends.
					for _, name := range []string{"cooldown", "sends"} {
						key := oc.prefix + "otp:{" + tc.phone + "}:" + name
						if n := oc.instances[0].rdb.Exists(context.Background(), key).Val(); n != 0 {
							t.Errorf("%s exists after denied sends: a counter was spent", key)
						}
					}
					// The blocked list shows the entry as a block.
					b := blockedList(t, oc, 1, "?phone="+pathPhone(tc.phone))
					if len(b.Blocks) != 1 || b.Blocks[0].Reason != "denied" || b.Blocks[0].Phone != tc.pattern || b.Blocks[0].Note != "fraud wave" {
						t.Errorf("blocked list: %+v", b.Blocks)
					}

					id := int64(entry["id"].(float64))
					if r := oc.ops(t, 1, "DELETE", fmt.Sprintf("/ops/denylist/%d", id), ""); r.Status != http.StatusNoContent {
						t.Fatalf("remove: %d %s", r.Status, r.Body)
					}
					opsWait(t, "instance 0 to drop the entry", func() bool {
						_, ok := oc.nodes[0].deny.Denied(tc.phone, time.Now())
						return !ok
					})
					if status, code := oc.send(t, 0, tc.phone); status != 200 {
						t.Errorf("send after removal: %d %s", status, code)
					}
				})
			}
			r := oc.ops(t, 1, "GET", "/ops/denylist", "")
			if r.Status != 200 {
				t.Fatalf("list: %d", r.Status)
			}
			if entries := r.json(t)["entries"].([]any); len(entries) != 0 {
				t.Errorf("deny-list after removals: %v", entries)
			}
			// The audit queue writes in the background: wait for both.
			var actions []string
			opsWait(t, "the 2 deny.add events written", func() bool {
				actions = nil
				events, err := oc.nodes[1].db.ListEvents(context.Background(), ops.EventFilter{Action: ops.ActionDenyAdd})
				if err != nil {
					t.Fatalf("ListEvents: %v", err)
				}
				for _, e := range events {
					actions = append(actions, e.Action+" "+e.Detail)
				}
				return len(actions) >= 2
			})
			if len(actions) != 2 {
				t.Errorf("deny.add events: %v, want 2", actions)
			}
		})
	}
}

func TestOpsDenyListRefusals(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"pattern":"+88213x"}`, 400},
		{`{"pattern":"88213"}`, 400},
		{`{"pattern":"+"}`, 400},
		{`{"reason":"no pattern"}`, 400},
		{`{"pattern":"+88213","expires_in":0}`, 400},
		{`{"pattern":"+88213","expires_at":"2001-01-01T00:00:00Z"}`, 400},
		{`{"pattern":"+88213","expires_in":60,"expires_at":"2101-01-01T00:00:00Z"}`, 400},
		{`{"pattern":"+88213","author":"me"}`, 400},
	} {
		if r := oc.ops(t, 0, "POST", "/ops/denylist", tc.body); r.Status != tc.want {
			t.Errorf("POST %s: %d, want %d: %s", tc.body, r.Status, tc.want, r.Body)
		}
	}
	for path, want := range map[string]int{"/ops/denylist/999": 404, "/ops/denylist/x": 400, "/ops/denylist/0": 400} {
		if r := oc.ops(t, 0, "DELETE", path, ""); r.Status != want {
			t.Errorf("DELETE %s: %d, want %d", path, r.Status, want)
		}
	}
}

func TestOpsEvents(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	for _, phone := range []string{"+14155550100", "+14155550101", "+14155550102"} {
		oc.send(t, 0, phone)
	}
	oc.send(t, 0, "+14155550100") // cooldown
	opsWait(t, "4 events written", func() bool {
		n := 0
		for _, p := range []string{"+14155550100", "+14155550101", "+14155550102"} {
			n += len(oc.eventsIn(t, p))
		}
		return n == 4
	})
	get := func(query string) (int, []map[string]any, any) {
		t.Helper()
		r := oc.ops(t, 0, "GET", "/ops/events"+query, "")
		if r.Status != 200 {
			return r.Status, nil, nil
		}
		var body struct {
			Events []map[string]any `json:"events"`
			Next   any              `json:"next_before_id"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("/ops/events: %v", err)
		}
		return r.Status, body.Events, body.Next
	}
	_, all, _ := get("")
	if len(all) != 4 || all[0]["outcome"] != "cooldown" {
		t.Fatalf("all events: %v", all)
	}
	_, one, _ := get("?phone=%2B1%20415%20555%200100")
	if len(one) != 2 {
		t.Errorf("events of +14155550100: %d, want 2", len(one))
	}
	_, page, next := get("?limit=3")
	if len(page) != 3 || next == nil {
		t.Fatalf("first page of 3: %d events, next %v", len(page), next)
	}
	_, rest, next2 := get(fmt.Sprintf("?limit=3&before_id=%v", next))
	if len(rest) != 1 || next2 != nil {
		t.Errorf("second page: %d events, next %v; want 1 and no next", len(rest), next2)
	}
	since := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if _, ev, _ := get("?action=otp.send&since=" + since); len(ev) != 0 {
		t.Errorf("events since an hour ahead: %d", len(ev))
	}
	for _, q := range []string{"?since=yesterday", "?limit=-1", "?limit=1001", "?before_id=x"} {
		if status, _, _ := get(q); status != 400 {
			t.Errorf("GET /ops/events%s: %d, want 400", q, status)
		}
	}
	if status, _, _ := get("?phone=12345"); status != 422 {
		t.Errorf("invalid phone: %d, want 422", status)
	}

	// Refused input is audited too: the number when it parsed, never the code.
	if r := oc.do(t, 0, "POST", "/otp/send", `{"phone":"12345"}`); r.Status != 422 {
		t.Fatalf("send to an invalid number: %d", r.Status)
	}
	if r := oc.do(t, 0, "POST", "/otp/verify", `{"phone":"+14155550101","code":"12ab"}`); r.Status != 422 {
		t.Fatalf("verify with a malformed code: %d", r.Status)
	}
	opsWait(t, "the refused send's event", func() bool {
		_, ev, _ := get("?action=otp.send")
		return len(ev) == 5 && ev[0]["outcome"] == "invalid_phone"
	})
	// Recorded after the send's, the verify's event may be written in a
	// later batch: wait for it too.
	var ev []map[string]any
	opsWait(t, "the refused verify's event", func() bool {
		_, ev, _ = get("?action=otp.verify")
		return len(ev) >= 1
	})
	if len(ev) != 1 || ev[0]["outcome"] != "invalid_code" || ev[0]["phone"] != "+14155550101" {
		t.Errorf("verify events: %v, want one invalid_code for +14155550101", ev)
	}
	if r := oc.ops(t, 0, "GET", "/ops/events?action=otp.verify", ""); strings.Contains(string(r.Body), "12ab") {
		t.Errorf("the guessed code is in the audit trail: %s", r.Body)
	}
}
