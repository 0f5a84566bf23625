-- The Verify service an audit event's request acted for (its SID, VA and
-- 32 hex digits), so that one service's sends, checks, cancels and
-- approvals can be told from another's (GET /ops/events?service=...).
-- '' for the default service: every /otp/... call, a Verify call of the
-- service marked default, and the events no service caused. The index
-- covers only the rows that have one. Same on both engines.

-- +goose Up
ALTER TABLE audit_events ADD COLUMN service TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_events_service ON audit_events (service, id) WHERE service <> '';

-- +goose Down
DROP INDEX audit_events_service;
ALTER TABLE audit_events DROP COLUMN service;
