-- Gives a key back after a failed attempt: the next claim runs afresh.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
-- ARGV[2]  how long the released record keeps its fence, in milliseconds
--
-- Replies 'ok', 'lost' or 'version:N'.
local rec = KEYS[1]
local r, reply = held(rec, ARGV[1])
if not r then return reply end
-- A released record holds nothing but its fence; it expires rather than accumulate. After it
-- is gone, the next fence comes from the server's clock, which is past this one by then.
redis.call('SET', rec, build('r', r.on, r.fes, 0, 0, clock(), r.fp, '', ''), 'PX', ARGV[2])
return 'ok'
