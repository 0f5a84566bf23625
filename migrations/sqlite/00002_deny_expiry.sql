-- The deny-list is read by expiry every few seconds on every instance, and
-- the retention job deletes entries that expired long ago. Same on both
-- engines.

-- +goose Up
CREATE INDEX deny_list_expires_at ON deny_list (expires_at);

-- +goose Down
DROP INDEX deny_list_expires_at;
