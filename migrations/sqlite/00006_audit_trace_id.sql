-- The OpenTelemetry trace ID of the request that led to an audit event
-- (32 lower-case hex digits), so that an event found in the ops view leads
-- to the trace of its request, and a trace to its events. '' when tracing
-- is off or the event came from no request. Same on both engines.

-- +goose Up
ALTER TABLE audit_events ADD COLUMN trace_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE audit_events DROP COLUMN trace_id;
