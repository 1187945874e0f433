-- Removes a key's record whatever its state (an operator's decision, also for a corrupt or
-- newer record), leaving a tombstone with only its fence.
--
-- KEYS[1]  the record
-- ARGV[1]  how long the tombstone keeps the fence, in milliseconds
-- ARGV[2]  the fence the record must still have (an operator's forget of what it looked at),
--          or '' for any
--
-- Replies 1 when there was a record (with that fence) and it is forgotten, else 0.
local rec = KEYS[1]
local kind = redis.call('TYPE', rec)['ok']
if kind == 'none' then return 0 end
local raw = nil
if kind == 'string' then
  raw = redis.call('GET', rec)
elseif kind == 'hash' then
  raw = upgrade(rec)
end
local r = raw and parse(raw)
if ARGV[2] ~= '' and (not r or num(r.fe) ~= ARGV[2]) then return 0 end
if not r then
  -- Another type, a newer format or garbage under our name: forget is the way out of Corrupt.
  redis.call('DEL', rec)
  return 1
end
if r.st == 'f' then return 0 end
-- The tombstone keeps the next claim's token above every earlier one even if the server's
-- clock steps back; it is invisible to inspect and scan, and expires by itself.
redis.call('SET', rec, build('f', '0', r.fes, 0, 0, clock(), r.fp, '', ''), 'PX', ARGV[1])
return 1
