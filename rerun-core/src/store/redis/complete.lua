-- Records the result of a claim and ends it; Redis itself removes the record at its expiry.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
-- ARGV[2]  the encoded result
-- ARGV[3]  how long to keep it, in microseconds
--
-- Replies 'ok', 'lost' (not the current claim), or 'version:N' (written by a newer rerun).
local rec = KEYS[1]
local r, reply = held(rec, ARGV[1])
if not r then return reply end
local now = clock()
-- The expiry falls on a whole millisecond, the precision of Redis' own key expiry: the record
-- is expired at the very instant Redis removes the key, and its time to live is never more
-- than the ttl asked for.
local expires_ms = math.floor((now + tonumber(ARGV[3])) / 1000)
redis.call('SET', rec, build('c', r.on, r.fes, 0, expires_ms * 1000, now, r.fp, '', ARGV[2]),
  'PXAT', num(expires_ms))
return 'ok'
