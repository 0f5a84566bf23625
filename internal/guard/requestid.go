package guard

import "context"

// requestIDKey carries the ID of the HTTP request a decision belongs to, so
// that the audit events it records can be found from a caller's logs.
type requestIDKey struct{}

// WithRequestID returns ctx carrying the request ID id (the X-Request-Id the
// HTTP layer answered with). The events recorded within it carry it.
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request ID ctx carries, "" when none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
