-- The X-Request-Id of the request behind an audit event, so that a refusal
-- seen in a calling app's logs (its problem body carries request_id) can be
-- found in the audit trail (GET /ops/events?request_id=...). '' for events
-- no request caused. The index covers only the rows that have one. Same on
-- both engines.

-- +goose Up
ALTER TABLE audit_events ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_events_request_id ON audit_events (request_id) WHERE request_id <> '';

-- +goose Down
DROP INDEX audit_events_request_id;
ALTER TABLE audit_events DROP COLUMN request_id;
