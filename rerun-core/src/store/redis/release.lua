-- Gives a key back after a failed attempt: the next claim runs afresh.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
-- ARGV[2]  how long the released record keeps its fence, in milliseconds
--
-- Replies 'ok', 'lost' or 'version:N'.
local SCHEMA = @SCHEMA@
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'v', 'st', 'fe')
if r[1] and (tonumber(r[1]) or 0) > SCHEMA then return 'version:' .. r[1] end
-- Fenced: a late release by a zombie must not free its successor's claim.
if r[2] ~= 'in_progress' or r[3] ~= ARGV[1] then return 'lost' end
redis.call('HSET', rec, 'st', 'released')
redis.call('HDEL', rec, 'ho')
-- A released record holds nothing but its fence; it expires rather than accumulate. After
-- it is gone, the next fence comes from the server's clock, which is past this one by then.
redis.call('PEXPIRE', rec, tonumber(ARGV[2]))
return 'ok'
