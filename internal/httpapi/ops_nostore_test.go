package httpapi_test

import (
	"testing"

	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsJSONIsNotCached: every ops JSON answer (full numbers, audit rows)
// carries Cache-Control: no-store, so no browser or proxy keeps a copy;
// refusals too.
func TestOpsJSONIsNotCached(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	oc.send(t, 0, "+14155550100")
	for _, tc := range []struct {
		method, path, body, key string
		status                  int
	}{
		{"GET", "/ops/blocked", "", opsKey, 200},
		{"DELETE", "/ops/blocked/%2B14155550100", "", opsKey, 200},
		{"POST", "/ops/denylist", `{"pattern":"+88213"}`, opsKey, 201},
		{"GET", "/ops/denylist", "", opsKey, 200},
		{"DELETE", "/ops/denylist/1", "", opsKey, 204},
		{"GET", "/ops/events", "", opsKey, 200},
		{"GET", "/ops/status", "", opsKey, 200},
		{"GET", "/ops/events", "", apiKey, 403},
		{"GET", "/ops/status", "", "", 401},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.key, func(t *testing.T) {
			r := oc.doKey(t, 0, tc.method, tc.path, tc.body, tc.key)
			if r.Status != tc.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tc.status)
			}
			if got := r.Header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control = %q, want no-store", got)
			}
		})
	}
}
