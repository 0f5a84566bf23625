-- read_verification returns the record KEYS[1] of id ARGV[1] with its
-- status derived against the code KEYS[2] (lib_code).
return status_of(KEYS[1], KEYS[2], ARGV[1])
