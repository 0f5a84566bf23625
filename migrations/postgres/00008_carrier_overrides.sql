-- The overrides of one carrier of a country (guard/carrier_override.go):
-- carrier_limit holds the sends to it to limit_value an hour, carrier_pause
-- refuses them all (limit_value 0). The subject is the country and the
-- carrier's key, "NG/mtn". Keep in step with the other engine's 00008.

-- +goose Up
ALTER TABLE overrides DROP CONSTRAINT overrides_kind_check;
ALTER TABLE overrides ADD CONSTRAINT overrides_kind_check CHECK (kind IN ('country_limit', 'country_pause',
    'carrier_limit', 'carrier_pause', 'prefix_limit', 'budget_per_hour', 'budget_per_day'));

-- +goose Down
DELETE FROM overrides WHERE kind IN ('carrier_limit', 'carrier_pause');
ALTER TABLE overrides DROP CONSTRAINT overrides_kind_check;
ALTER TABLE overrides ADD CONSTRAINT overrides_kind_check CHECK (kind IN ('country_limit', 'country_pause',
    'prefix_limit', 'budget_per_hour', 'budget_per_day'));
