-- take_limit is take_limits for one take that spends (cost > 0, not
-- held), the common /limits/check: lib_limit's take_one. KEYS are its cur
-- and prev hashes, ARGV take_limits' eight values of one take.
return take_one(1, 1, now_us())
