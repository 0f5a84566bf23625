package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/problem"
)

// DecodeJSON reads exactly one JSON object into v (whatever the
// Content-Type says: curl -d sends a form type by default), refusing unknown fields,
// wrong types and trailing data with a reason the caller can act on. The
// body's size is already bounded by the BodyLimit middleware.
func DecodeJSON(c echo.Context, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	return decoded(body, err, v)
}

// DecodeJSONInto is DecodeJSON reading the body into *buf, which the
// caller keeps for the next request (the hot path, POST /limits/check):
// the decoded strings are copies, so buf may be reused once it returns.
func DecodeJSONInto(c echo.Context, v any, buf *[]byte) error {
	b := (*buf)[:0]
	r := c.Request().Body
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*buf = b
			return decoded(nil, err, v)
		}
	}
	*buf = b
	return decoded(b, nil, v)
}

// decoded is the answer to a body read with readErr and decoded into v:
// nil, 413 for a body past the limit, or a problem saying what is wrong.
func decoded(body []byte, readErr error, v any) error {
	var tooLarge *http.MaxBytesError
	reason := ""
	switch {
	case errors.As(readErr, &tooLarge) || errors.Is(readErr, echo.ErrStatusRequestEntityTooLarge):
		return echo.ErrStatusRequestEntityTooLarge
	case readErr != nil:
		reason = "could not read the request body"
	default:
		reason = bodyReason(body, v)
	}
	if reason == "" {
		return nil
	}
	return problem.Errorf(problem.CodeInvalidRequest, "%s", reason)
}

// strict are the decoding rules of every body. Field names match exactly
// and each may appear once (encoding/json v1 matched "PHONE" to phone and
// kept the last of two "phone"s, so a gateway checking one could be shown
// another number than the one otpguard used); unknown fields are refused;
// strings must be valid UTF-8. The go-json-experiment decoder (the
// encoding/json/v2 semantics) does all of it: no hand-written parser.
var strict = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsonv2.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// DecodeBytes is DecodeJSON without the request, for fuzzing.
func DecodeBytes(body []byte, v any) error { return decoded(body, nil, v) }

// bodyReason decodes body into v, and says what is wrong with it ("" when
// nothing is).
func bodyReason(body []byte, v any) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return "request body is empty; send a JSON object"
	}
	if err := jsonv2.Unmarshal(body, v, strict); err != nil {
		return jsonReason(err)
	}
	return ""
}

// jsonReason says what is wrong with a body, naming the field by its path
// (checks[0].key) and the JSON it got.
func jsonReason(err error) string {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.As(err, &syn):
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return fmt.Sprintf("duplicate field %s: send each field once", quoteField(syn.JSONPointer))
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return "malformed JSON: unexpected end of body"
		case strings.Contains(syn.Error(), "after top-level value"):
			return "request body holds data after the JSON object"
		case strings.Contains(syn.Error(), "invalid UTF-8"):
			return fmt.Sprintf("malformed JSON at byte %d: text must be valid UTF-8", syn.ByteOffset)
		}
		return fmt.Sprintf("malformed JSON at byte %d", syn.ByteOffset)
	case errors.As(err, &sem):
		if errors.Is(sem.Err, jsonv2.ErrUnknownName) {
			return fmt.Sprintf("unknown field %s (field names are case-sensitive)", quoteField(sem.JSONPointer))
		}
		field := quoteField(sem.JSONPointer)
		got := kindName(sem.JSONKind)
		if len(sem.JSONPointer) == 0 {
			return "request body must be a JSON object, got " + got
		}
		var t reflect.Type = sem.GoType
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == reflect.TypeFor[time.Time]() && sem.JSONKind == '"':
			return fmt.Sprintf("%s must be an RFC 3339 time, like 2026-03-01T12:00:00Z", field)
		case isInteger(t) && sem.JSONKind == '0':
			return fmt.Sprintf("%s must be a whole number, got %s", field, clip(string(sem.JSONValue)))
		}
		return fmt.Sprintf("%s must be %s, got %s", field, typeName(t), got)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of body"
	}
	return "malformed JSON"
}

// fieldPath writes a JSON pointer as a caller writes the field:
// /checks/0/key is checks[0].key.
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 32); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return clip(b.String())
}

// quoteField is a field named by the caller, quoted: it may be anything.
func quoteField(p jsontext.Pointer) string {
	return strconv.Quote(fieldPath(p))
}

// clip bounds what a refusal repeats of the caller's body.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isInteger(t reflect.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	case '[':
		return "an array"
	case '{':
		return "an object"
	}
	return "something else"
}

func typeName(t reflect.Type) string {
	if t == nil {
		return "something else"
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return "an RFC 3339 time"
	case isInteger(t):
		return "a whole number"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "something else"
}

// WriteJSON writes v as JSON, "<" and ">" as they are (no HTML escaping).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
