-- PostgreSQL schema. Keep it in step with ../sqlite/00001_init.sql: same
-- version, same tables and columns; only types and identity syntax differ.
-- Times are BIGINT unix milliseconds (UTC) on both engines, so that they
-- sort and compare the same way everywhere.

-- +goose Up
CREATE TABLE deny_list (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pattern    TEXT   NOT NULL CHECK (pattern ~ '^\+[0-9]{1,15}$'),
    reason     TEXT   NOT NULL DEFAULT '',
    author     TEXT   NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL,
    expires_at BIGINT
);
CREATE INDEX deny_list_pattern ON deny_list (pattern);

CREATE TABLE audit_events (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      BIGINT NOT NULL,
    action  TEXT   NOT NULL CHECK (action <> ''),
    outcome TEXT   NOT NULL DEFAULT '',
    phone   TEXT   NOT NULL DEFAULT '',
    country TEXT   NOT NULL DEFAULT '',
    ip      TEXT   NOT NULL DEFAULT '',
    actor   TEXT   NOT NULL DEFAULT '',
    detail  TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_phone_id  ON audit_events (phone, id);
CREATE INDEX audit_events_action_id ON audit_events (action, id);
CREATE INDEX audit_events_at        ON audit_events (at);

-- +goose Down
DROP TABLE audit_events;
DROP TABLE deny_list;
