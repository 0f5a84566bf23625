-- Each audit event's identity (guard.Event.UID: 32 hex digits, made when
-- the event is), so that a batch retried after a commit whose answer was
-- lost stores each event once: the writer inserts with ON CONFLICT (uid)
-- DO NOTHING. Rows written before this migration keep NULL, which a
-- unique index lets repeat. Same on both engines.

-- +goose Up
ALTER TABLE audit_events ADD COLUMN uid TEXT;
CREATE UNIQUE INDEX audit_events_uid ON audit_events (uid);

-- +goose Down
DROP INDEX audit_events_uid;
ALTER TABLE audit_events DROP COLUMN uid;
