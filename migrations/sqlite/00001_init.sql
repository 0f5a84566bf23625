-- SQLite schema. Keep it in step with ../postgres/00001_init.sql: same
-- version, same tables and columns; only types and identity syntax differ.
-- Times are INTEGER unix milliseconds (UTC) on both engines, so that they
-- sort and compare the same way everywhere.
--
-- AUTOINCREMENT keeps ids from being reused after the newest rows are
-- deleted: an id is an event's pagination cursor and a deny entry's handle
-- for removal, and neither may come to mean a different row.

-- +goose Up
CREATE TABLE deny_list (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pattern    TEXT    NOT NULL CHECK (
                   length(pattern) BETWEEN 2 AND 16
                   AND pattern GLOB '+[0-9]*'
                   AND pattern NOT GLOB '+*[^0-9]*'),
    reason     TEXT    NOT NULL DEFAULT '',
    author     TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE INDEX deny_list_pattern ON deny_list (pattern);

CREATE TABLE audit_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    action  TEXT    NOT NULL CHECK (action <> ''),
    outcome TEXT    NOT NULL DEFAULT '',
    phone   TEXT    NOT NULL DEFAULT '',
    country TEXT    NOT NULL DEFAULT '',
    ip      TEXT    NOT NULL DEFAULT '',
    actor   TEXT    NOT NULL DEFAULT '',
    detail  TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_phone_id  ON audit_events (phone, id);
CREATE INDEX audit_events_action_id ON audit_events (action, id);
CREATE INDEX audit_events_at        ON audit_events (at);

-- +goose Down
DROP TABLE audit_events;
DROP TABLE deny_list;
