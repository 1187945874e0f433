-- Extends a claim's lease to a full lease from now, on the server's clock.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
-- ARGV[2]  the lease, in microseconds
--
-- Replies 'ok', 'lost' or 'version:N'.
local SCHEMA = @SCHEMA@
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'v', 'st', 'fe')
if r[1] and (tonumber(r[1]) or 0) > SCHEMA then return 'version:' .. r[1] end
-- Fenced: a holder whose lease already ran out and was taken over must not extend the
-- successor's lease; it learns of the takeover here.
if r[2] ~= 'in_progress' or r[3] ~= ARGV[1] then return 'lost' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', rec, 'lu', string.format('%.0f', now + tonumber(ARGV[2])))
return 'ok'
