-- Marks a claim's outcome unknown: an at-most-once body may have run, its result was not
-- recorded. The record keeps no expiry, so that only an operator's forget runs the key again.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
--
-- Replies 'ok', 'lost' or 'version:N'.
local SCHEMA = @SCHEMA@
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'v', 'st', 'fe')
if r[1] and (tonumber(r[1]) or 0) > SCHEMA then return 'version:' .. r[1] end
-- Fenced: a zombie must not turn its successor's live claim into an unknown outcome.
if r[2] ~= 'in_progress' or r[3] ~= ARGV[1] then return 'lost' end
redis.call('HSET', rec, 'st', 'unknown')
return 'ok'
