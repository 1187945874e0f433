-- Records the result of a claim and ends it; Redis itself removes the record at its expiry.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
-- ARGV[2]  the encoded result
-- ARGV[3]  how long to keep it, in microseconds
--
-- Replies 'ok', 'lost' (not the current claim), or 'version:N' (written by a newer rerun).
local SCHEMA = @SCHEMA@
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'v', 'st', 'fe')
if r[1] and (tonumber(r[1]) or 0) > SCHEMA then return 'version:' .. r[1] end
-- The fence check: a zombie holder whose claim was taken over (the record carries a greater
-- fence) or already ended must not overwrite its successor's result.
if r[2] ~= 'in_progress' or r[3] ~= ARGV[1] then return 'lost' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- The expiry falls on a whole millisecond, the precision of Redis' own key expiry: the record
-- is judged expired ('ex', in microseconds) at the very instant Redis removes the key, never
-- later and never earlier, and its time to live is never more than the ttl asked for.
local expires_ms = math.floor((now + tonumber(ARGV[3])) / 1000)
redis.call('HSET', rec, 'st', 'completed', 're', ARGV[2], 'ex', string.format('%.0f', expires_ms * 1000))
redis.call('HDEL', rec, 'ho', 'lu')
redis.call('PEXPIREAT', rec, string.format('%.0f', expires_ms))
return 'ok'
