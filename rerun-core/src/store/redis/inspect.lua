-- Reads one record without changing it (a record of rerun 0.1 is upgraded first), with the
-- server's clock in the same step, so that the lease and expiry left are measured on the
-- clock that decides them.
--
-- KEYS[1]  the record
--
-- Reply: {now in us, 'none'} | {now, 'record', the record's string, its PTTL in ms}
--      | {now, 'other', type}
-- The PTTL gives a completed record's times when it stores its time to live (RELATIVE, see
-- prelude.lua).
local rec = KEYS[1]
local now = num(clock())
local raw, err = load(rec)
if err then return {now, 'other', redis.call('TYPE', rec)['ok']} end
if not raw then return {now, 'none'} end
return {now, 'record', raw, redis.call('PTTL', rec)}
