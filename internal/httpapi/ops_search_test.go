package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsLookUpNumber: GET /ops/numbers/{phone} answers, for a number in
// each state and in any spelling, what refuses its next send and what it
// holds; an unparsable number is 422.
func TestOpsLookUpNumber(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	seedSearch(t, oc)
	type answer struct {
		Phone    string
		Refusing []struct{ Code string }
		DeniedBy *struct{ Pattern string } `json:"denied_by"`
		Blocks   []struct{ Reason string }
		Sends    *struct{ Count, Limit int64 }
		Trusted  *bool
		Events   []struct{ Action, Outcome string }
		Code     *struct {
			Guesses     int64 `json:"guesses"`
			MaxAttempts int64 `json:"max_attempts"`
			Locked      bool  `json:"locked"`
		}
	}
	tests := []struct {
		name, path   string
		wantRefusing []string
		wantTrusted  bool
		wantEvents   int
		wantGuesses  string // the live code's "guesses of max"; "" none
	}{
		{"blocked", "/ops/numbers/%2B44%207400%20900001", []string{"too_many_attempts"}, false, 0, ""},
		{"deny-listed", "/ops/numbers/%2B447400900002", []string{"denied"}, false, 1, ""}, // ops.deny.add
		{"trusted", "/ops/numbers/+44-7400-900003", nil, true, 0, ""},
		{"rate-limited", "/ops/numbers/%2B447400900004", []string{"cooldown"}, false, 2, "0 of 5"},
		{"unknown", "/ops/numbers/%2B447400900005", nil, false, 0, ""},
		{"two wrong guesses", "/ops/numbers/+44-7400-900-006", []string{"cooldown"}, false, 3, "2 of 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := oc.ops(t, 0, "GET", tt.path, "")
			var a answer
			if r.Status != http.StatusOK || json.Unmarshal(r.Body, &a) != nil {
				t.Fatalf("GET %s: %d %s", tt.path, r.Status, r.Body)
			}
			var codes []string
			for _, c := range a.Refusing {
				codes = append(codes, c.Code)
			}
			if diff := cmp.Diff(tt.wantRefusing, codes); diff != "" {
				t.Errorf("refusing (-want +got):\n%s", diff)
			}
			if a.Trusted == nil || *a.Trusted != tt.wantTrusted {
				t.Errorf("trusted: got %v, want %v", a.Trusted, tt.wantTrusted)
			}
			if len(a.Events) != tt.wantEvents {
				t.Errorf("events: got %d (%+v), want %d", len(a.Events), a.Events, tt.wantEvents)
			}
			guesses := ""
			if a.Code != nil {
				guesses = fmt.Sprintf("%d of %d", a.Code.Guesses, a.Code.MaxAttempts)
				if a.Code.Locked {
					guesses += " locked"
				}
			}
			if guesses != tt.wantGuesses {
				t.Errorf("code: got %q, want %q", guesses, tt.wantGuesses)
			}
			if slices.Contains(codes, "denied") && (a.DeniedBy == nil || a.DeniedBy.Pattern != searchDenied) {
				t.Errorf("denied_by: got %+v, want %s", a.DeniedBy, searchDenied)
			}
		})
	}
	if r := oc.ops(t, 0, "GET", "/ops/numbers/12345", ""); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("an unparsable number: got %d, want 422", r.Status)
	}
}
