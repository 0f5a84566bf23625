package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsAuditSlowDatabase: with PostgreSQL 300 ms away each way (issue
// 23: 10 sends gave 51 otp.send rows, 1 deny-list add gave 2), every
// event is stored once, and otpguard_audit_written_total equals the rows,
// the deny-list add's event (written directly, within what is left of the
// route's database deadline, else queued) included. Whether a write here
// times out after its COMMIT depends on the machine's pace; the lost
// answer itself is replayed exactly by sqlstore's
// TestAuditQueueRetryAfterLostAnswerStoresOnce.
func TestOpsAuditSlowDatabase(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EnginePostgres, dbSlow: true, dbTimeout: 5 * time.Second})
	// Slow once started: at 300 ms a start spends its 5 s on the loads.
	oc.dbLatency.Set(300 * time.Millisecond)
	direct, err := sqlstore.Open(t.Context(), oc.directURL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	phones := make([]string, 10)
	for i := range phones {
		phones[i] = fmt.Sprintf("+1415555%04d", 200+i)
		if status, code := oc.send(t, 0, phones[i]); status != http.StatusOK {
			t.Fatalf("send %s: %d %s", phones[i], status, code)
		}
	}
	if r := oc.ops(t, 0, "POST", "/ops/denylist", `{"pattern":"+4474001","reason":"slow database"}`); r.Status != http.StatusCreated {
		t.Fatalf("add to the deny-list: %d %s", r.Status, r.Body)
	}
	deadline := time.Now().Add(90 * time.Second)
	for oc.nodes[0].audit.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("audit events still waiting after 90 s: %d", oc.nodes[0].audit.Len())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The rows, once both actions' are there (bounded: a write the queue
	// no longer holds may still be on its way through the slow link), then
	// held to exactly one each.
	var all []guard.Event
	byAction := map[string]int{}
	for {
		all, err = direct.ListEvents(context.Background(), ops.EventFilter{Limit: ops.MaxEventLimit})
		if err != nil {
			t.Fatal(err)
		}
		clear(byAction)
		for _, e := range all {
			byAction[e.Action]++
		}
		if byAction[guard.ActionOTPSend] >= 10 && byAction[ops.ActionDenyAdd] >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if byAction[guard.ActionOTPSend] != 10 || byAction[ops.ActionDenyAdd] != 1 {
		t.Errorf("rows by action: %v, want 10 %s and 1 %s", byAction, guard.ActionOTPSend, ops.ActionDenyAdd)
	}
	if got, want := scrapeMetric(t, oc.cluster, "otpguard_audit_written_total"), len(all); got != strconv.Itoa(want) {
		t.Errorf("otpguard_audit_written_total %s, want %d: the rows written", got, want)
	}
}
