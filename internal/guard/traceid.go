package guard

import "context"

// traceIDKey carries the trace ID of the request a decision belongs to, so
// that the audit events it records lead to its trace. The HTTP layer puts
// it there when tracing is on; guard knows nothing of OpenTelemetry.
type traceIDKey struct{}

// WithTraceID returns ctx carrying the trace ID id (32 hex digits). The
// events recorded within it carry it.
func WithTraceID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, traceIDKey{}, id)
}

// TraceID is the trace ID ctx carries, "" when none.
func TraceID(ctx context.Context) string {
	id, _ := ctx.Value(traceIDKey{}).(string)
	return id
}
