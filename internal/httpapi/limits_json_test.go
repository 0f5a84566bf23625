package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/limit"
)

// The hand-written answer of POST /limits/check is byte for byte what
// echo's c.JSON (encoding/json) writes for checkResponse.
func TestAppendCheckResponseMatchesEncodingJSON(t *testing.T) {
	batches := []limit.Batch{
		{Allowed: true, Decisions: []limit.Decision{{
			Policy: "api", Key: "user:1", Mode: limit.ModeExact, Allowed: true, WouldAllow: true,
			Limit: 100, Remaining: 99, ResetAfter: 1500 * time.Microsecond,
		}}},
		{Allowed: false, Decisions: []limit.Decision{
			{Policy: "login-ip", Key: "10.0.0.1", Mode: limit.ModeFallback, Limit: 5, Remaining: 0,
				RetryAfter: 2*time.Second + time.Nanosecond, ResetAfter: time.Minute},
			{Policy: "shadow_p", Key: "a+b=c@d/e.f:g-h_i", Mode: limit.ModeMemory, Allowed: true, Shadow: true,
				Limit: -1, Remaining: -3},
			{Policy: "shadow_p", Key: "k", Mode: limit.ModeSync, Allowed: true, Shadow: true, WouldAllow: true},
		}},
		// Not a valid key or policy name, but escaped as encoding/json does.
		{Allowed: true, Decisions: []limit.Decision{{Policy: `a"b\c`, Key: "<x>&\u00e9\x01\u2028", Mode: limit.ModeExact}}},
		{Allowed: true, Decisions: []limit.Decision{}},
	}
	e := echo.New()
	for i, b := range batches {
		rec := httptest.NewRecorder()
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/limits/check", nil), rec)
		if err := c.JSON(http.StatusOK, checkResponseOf(b)); err != nil {
			t.Fatal(err)
		}
		got := appendCheckResponse(nil, b)
		if !bytes.Equal(got, rec.Body.Bytes()) {
			t.Errorf("batch %d:\n got %s\nwant %s", i, got, rec.Body.Bytes())
		}
		if !json.Valid(got) {
			t.Errorf("batch %d: not JSON: %s", i, got)
		}
	}
}
