package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
)

// decodeJSON reads exactly one JSON object into v (whatever the
// Content-Type says: curl -d sends a form type by default), refusing unknown fields,
// wrong types and trailing data with a reason the caller can act on. The
// body's size is already bounded by the BodyLimit middleware.
func decodeJSON(c echo.Context, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) || errors.Is(err, echo.ErrStatusRequestEntityTooLarge) {
			return echo.ErrStatusRequestEntityTooLarge
		}
		return guard.Errorf(guard.CodeInvalidRequest, "could not read the request body")
	}
	return decodeBytes(body, v)
}

// decodeBytes is decodeJSON without the request, for fuzzing.
func decodeBytes(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return guard.Errorf(guard.CodeInvalidRequest, "request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return guard.Errorf(guard.CodeInvalidRequest, "%s", jsonReason(err))
	}
	if dec.More() {
		return guard.Errorf(guard.CodeInvalidRequest, "request body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return guard.Errorf(guard.CodeInvalidRequest, "request body holds data after the JSON object")
	}
	return nil
}

func jsonReason(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("field %q must be %s, got %s", typ.Field, jsonType(typ.Type.Kind().String()), typ.Value)
		}
		return fmt.Sprintf("request body must be a JSON object, got %s", typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of body"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		return "malformed JSON"
	}
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "slice":
		return "an array"
	case "ptr", "struct", "map":
		return "an object"
	}
	return kind
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
