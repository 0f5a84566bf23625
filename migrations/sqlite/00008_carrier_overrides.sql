-- The overrides of one carrier of a country (guard/carrier_override.go):
-- carrier_limit holds the sends to it to limit_value an hour, carrier_pause
-- refuses them all (limit_value 0). The subject is the country and the
-- carrier's key, "NG/mtn". Keep in step with the other engine's 00008.
--
-- SQLite cannot change a CHECK in place: the table is built anew and the
-- rows copied, IDs and the AUTOINCREMENT sequence kept (an ID removed is
-- never given again, as before).

-- +goose Up
CREATE TABLE overrides_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT    NOT NULL CHECK (kind IN ('country_limit', 'country_pause', 'carrier_limit', 'carrier_pause',
                                                 'prefix_limit', 'budget_per_hour', 'budget_per_day')),
    subject     TEXT    NOT NULL DEFAULT '',
    limit_value INTEGER  NOT NULL CHECK (limit_value >= 0),
    reason      TEXT    NOT NULL CHECK (reason <> ''),
    author      TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER  NOT NULL,
    expires_at  INTEGER  NOT NULL
);
INSERT INTO overrides_new (id, kind, subject, limit_value, reason, author, created_at, expires_at)
    SELECT id, kind, subject, limit_value, reason, author, created_at, expires_at FROM overrides;
DELETE FROM sqlite_sequence WHERE name = 'overrides_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'overrides_new', seq FROM sqlite_sequence WHERE name = 'overrides';
DROP TABLE overrides;
ALTER TABLE overrides_new RENAME TO overrides;
CREATE INDEX overrides_expires_at ON overrides (expires_at);

-- +goose Down
CREATE TABLE overrides_old (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT    NOT NULL CHECK (kind IN ('country_limit', 'country_pause', 'prefix_limit', 'budget_per_hour', 'budget_per_day')),
    subject     TEXT    NOT NULL DEFAULT '',
    limit_value INTEGER  NOT NULL CHECK (limit_value >= 0),
    reason      TEXT    NOT NULL CHECK (reason <> ''),
    author      TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER  NOT NULL,
    expires_at  INTEGER  NOT NULL
);
INSERT INTO overrides_old (id, kind, subject, limit_value, reason, author, created_at, expires_at)
    SELECT id, kind, subject, limit_value, reason, author, created_at, expires_at FROM overrides
    WHERE kind NOT IN ('carrier_limit', 'carrier_pause');
DELETE FROM sqlite_sequence WHERE name = 'overrides_old';
INSERT INTO sqlite_sequence (name, seq) SELECT 'overrides_old', seq FROM sqlite_sequence WHERE name = 'overrides';
DROP TABLE overrides;
ALTER TABLE overrides_old RENAME TO overrides;
CREATE INDEX overrides_expires_at ON overrides (expires_at);
