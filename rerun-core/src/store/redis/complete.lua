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
local expires = now + tonumber(ARGV[3])
redis.call('HSET', rec, 'st', 'completed', 're', ARGV[2], 'ex', string.format('%.0f', expires))
redis.call('HDEL', rec, 'ho', 'lu')
-- Rounded up to whole milliseconds, so the key never vanishes before 'ex' says it expired.
redis.call('PEXPIREAT', rec, math.ceil(expires / 1000))
return 'ok'
