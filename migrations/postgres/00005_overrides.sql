-- The ops desk's emergency overrides (README.md, "Changing limits during an
-- attack"): each tightens one rule of the policy file (a country's or a
-- prefix's limit, a country paused, the hourly or daily budget) until
-- expires_at. This table is the source of truth; every instance loads the
-- live rows with the deny-list. Rows are deleted when removed; expired rows
-- stay until the retention job drops them. limit_value is 0 for a pause.
-- Times are unix milliseconds, as in 00001. Keep in step with the other
-- engine's 00005.

-- +goose Up
CREATE TABLE overrides (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        TEXT    NOT NULL CHECK (kind IN ('country_limit', 'country_pause', 'prefix_limit', 'budget_per_hour', 'budget_per_day')),
    subject     TEXT    NOT NULL DEFAULT '',
    limit_value BIGINT  NOT NULL CHECK (limit_value >= 0),
    reason      TEXT    NOT NULL CHECK (reason <> ''),
    author      TEXT    NOT NULL DEFAULT '',
    created_at  BIGINT  NOT NULL,
    expires_at  BIGINT  NOT NULL
);
CREATE INDEX overrides_expires_at ON overrides (expires_at);

-- +goose Down
DROP TABLE overrides;
