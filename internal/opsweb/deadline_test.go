package opsweb_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/opsweb"
)

// sqlCalls is the ops database as a fake that notes the database deadline
// of every call made to it.
type sqlCalls struct {
	mu        sync.Mutex
	deadlines map[string][]time.Time // by method; zero: the call had none
}

func (f *sqlCalls) note(ctx context.Context, method string) {
	d, _ := ops.DatabaseDeadline(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deadlines[method] = append(f.deadlines[method], d)
}

func (f *sqlCalls) AddDeny(ctx context.Context, e guard.DenyEntry) (guard.DenyEntry, error) {
	f.note(ctx, "AddDeny")
	e.ID = 1
	return e, nil
}

func (f *sqlCalls) RemoveDeny(ctx context.Context, _ int64) error {
	f.note(ctx, "RemoveDeny")
	return nil
}

func (f *sqlCalls) ListDeny(ctx context.Context) ([]guard.DenyEntry, error) {
	f.note(ctx, "ListDeny")
	return nil, nil
}

func (f *sqlCalls) WriteEvents(ctx context.Context, _ []guard.Event) error {
	f.note(ctx, "WriteEvents")
	return nil
}

func (f *sqlCalls) ListEvents(ctx context.Context, _ ops.EventFilter) ([]guard.Event, error) {
	f.note(ctx, "ListEvents")
	return nil, nil
}

func (f *sqlCalls) PruneEvents(context.Context, time.Time) (int64, error) { return 0, nil }

// An ops route's SQL calls all end by one deadline, OTPGUARD_DATABASE_TIMEOUT
// after the request arrived, the reload and the audit write that follow a
// change included: the route answers within one timeout, not one per call
// (issue 23: 6.6-11 s against a 3 s timeout).
func TestOpsRouteSQLSharesOneDeadline(t *testing.T) {
	const timeout = 3 * time.Second
	const key = "ops-key-0123456789"
	tests := []struct {
		name, method, path, body string
		calls                    []string // that the route makes
	}{
		{"add to the deny-list", "POST", "/ops/denylist", `{"pattern":"+4474001","reason":"pumping"}`, []string{"AddDeny", "ListDeny", "WriteEvents"}},
		{"remove from the deny-list", "DELETE", "/ops/denylist/1", "", []string{"RemoveDeny", "ListDeny", "WriteEvents"}},
		{"list events", "GET", "/ops/events", "", []string{"ListEvents"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := &sqlCalls{deadlines: map[string][]time.Time{}}
			desk := ops.NewDesk(ops.DeskOptions{DenyList: db, Deny: ops.NewDenyCache(db, ops.DenyCacheOptions{}),
				Audit: db, DatabaseTimeout: timeout})
			h := opsweb.New(opsweb.Options{Ops: desk, OpsKeys: httpx.NewKeyring([]string{key})})
			e := echo.New()
			e.POST("/ops/denylist", h.API.AddDeny, h.SignIn.RequireOps(false))
			e.DELETE("/ops/denylist/:id", h.API.RemoveDeny, h.SignIn.RequireOps(false))
			e.GET("/ops/events", h.API.ListEvents, h.SignIn.RequireOps(false))

			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			before := time.Now()
			e.ServeHTTP(rec, req)
			after := time.Now()
			if rec.Code >= http.StatusBadRequest {
				t.Fatalf("%s %s: %d %s", tt.method, tt.path, rec.Code, rec.Body)
			}

			var first time.Time
			for _, m := range tt.calls {
				ds := db.deadlines[m]
				if len(ds) == 0 {
					t.Fatalf("the route made no %s call", m)
				}
				for _, d := range ds {
					if first.IsZero() {
						first = d
					}
					if d.IsZero() || !d.Equal(first) {
						t.Errorf("%s: database deadline %v, want %v, one for every call of the route", m, d, first)
					}
				}
			}
			if first.Before(before.Add(timeout)) || first.After(after.Add(timeout)) {
				t.Errorf("database deadline %v, want the timeout (%s) after the request arrived (between %v and %v)",
					first, timeout, before.Add(timeout), after.Add(timeout))
			}
		})
	}
}
