-- Removes a key's record whatever its state (an operator's decision, also for a corrupt or
-- newer record), leaving a tombstone with only its fence.
--
-- KEYS[1]  the record
-- ARGV[1]  how long the tombstone keeps the fence, in milliseconds
--
-- Replies 1 when there was a record, else 0.
local SCHEMA = @SCHEMA@
local rec = KEYS[1]
local kind = redis.call('TYPE', rec)['ok']
if kind == 'none' then return 0 end
-- A key of another type under our name is removed too: forget is the way out of `Corrupt`.
if kind ~= 'hash' then
  redis.call('DEL', rec)
  return 1
end
local r = redis.call('HMGET', rec, 'st', 'fe')
if r[1] == 'forgotten' then return 0 end
redis.call('DEL', rec)
-- The tombstone keeps the next claim's token above every earlier one even if the server's
-- clock steps back; it is invisible to inspect and scan, and expires by itself.
if tonumber(r[2]) then
  redis.call('HSET', rec, 'v', SCHEMA, 'st', 'forgotten', 'fe', r[2])
  redis.call('PEXPIRE', rec, tonumber(ARGV[1]))
end
return 1
