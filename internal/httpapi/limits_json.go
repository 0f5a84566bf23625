package httpapi

import (
	"encoding/json"
	"strconv"

	"github.com/otpguard/otpguard/internal/limit"
)

// The answer of POST /limits/check is written by hand into a reused
// buffer: it is the hottest path, and encoding/json's reflection and
// buffers cost it a visible share of its CPU. The bytes are those
// encoding/json writes through echo's c.JSON for checkResponse (same
// field order, omitempty, HTML-safe escaping, a final newline); the tests
// in limits_json_test.go hold the two to each other.

// appendCheckResponse appends the JSON of a /limits/check answer.
func appendCheckResponse(dst []byte, batch limit.Batch) []byte {
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, batch.Allowed)
	dst = append(dst, `,"decisions":[`...)
	for i, d := range batch.Decisions {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"policy":`...)
		dst = appendJSONString(dst, d.Policy)
		dst = append(dst, `,"key":`...)
		dst = appendJSONString(dst, d.Key)
		dst = append(dst, `,"mode":`...)
		dst = appendJSONString(dst, string(d.Mode))
		dst = append(dst, `,"allowed":`...)
		dst = strconv.AppendBool(dst, d.Allowed)
		if d.Shadow {
			dst = append(dst, `,"shadow":true,"would_allow":`...)
			dst = strconv.AppendBool(dst, d.WouldAllow)
		}
		dst = append(dst, `,"limit":`...)
		dst = strconv.AppendInt(dst, d.Limit, 10)
		dst = append(dst, `,"remaining":`...)
		dst = strconv.AppendInt(dst, d.Remaining, 10)
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, ceilMs(d.RetryAfter), 10)
		dst = append(dst, `,"reset_after_ms":`...)
		dst = strconv.AppendInt(dst, ceilMs(d.ResetAfter), 10)
		dst = append(dst, '}')
	}
	return append(dst, "]}\n"...)
}

// appendJSONString appends s as a JSON string, as encoding/json writes it.
// Policy names and keys are plain ASCII (limit.ValidateKey, policy name
// rules), which needs no escaping; anything else goes through
// encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string: cannot fail
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
