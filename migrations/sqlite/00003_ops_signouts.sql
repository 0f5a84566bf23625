-- Ops sessions signed out before they expire. A session is a signed token
-- every instance checks alone; signing out must outlive Redis (which may
-- restart empty), so each sign-out is kept here until the token would have
-- expired, and every instance caches the list. id is a digest of the token
-- (never the token); expires_at is unix milliseconds. Same on both engines.

-- +goose Up
CREATE TABLE ops_signouts (
    id         TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
CREATE INDEX ops_signouts_expires_at ON ops_signouts (expires_at);

-- +goose Down
DROP TABLE ops_signouts;
