-- Records the result of a claim and ends it; Redis itself removes the record at its expiry.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence, 16 digits as the record stores it (or as many as it has)
-- ARGV[2]  the encoded result
-- ARGV[3]  how long to keep it, in microseconds
--
-- Replies 'ok', 'lost' (not the current claim), or 'version:N' (written by a newer rerun).
local rec = KEYS[1]
local raw = redis.pcall('GET', rec)
-- The expiry falls on a whole millisecond, the precision of Redis' own key expiry: the record
-- is expired at the very instant Redis removes the key, and its time to live is never more
-- than the ttl asked for.
--
-- The common case, read without `parse` and written without `build`: an in-progress record of
-- this format that carries the caller's fence, compared as the 16 digits it is stored as. A
-- completion keeps only the once flag, the fence and the fingerprint, which it copies as they
-- are stored, and writes every other field anew: no table, no number read, the new numbers in
-- one format. On a Lua server every library call costs, so this path makes as few as it can.
if type(raw) == 'string' and string.sub(raw, 1, 2) == FORMAT .. 'p'
    and #raw >= HEADER and string.sub(raw, 4, 19) == ARGV[1] then
  local now = clock()
  local expires_ms = math.floor((now + ARGV[3]) / 1000)
  -- The same bytes as build('c', once, fence, 0, expires_ms * 1000, now, fingerprint, '',
  -- result); a test holds the two paths to each other (redis_store.rs).
  redis.call('SET', rec, FORMAT .. 'c' .. string.sub(raw, 3, 19) .. ZERO ..
      string.format('%016d%016d', expires_ms * 1000, now) .. string.sub(raw, 68, 99) ..
      '0000' .. ARGV[2],
    'PXAT', num(expires_ms))
  return 'ok'
end
-- Anything else (another state or fence, another format, a short record, a hash of rerun 0.1)
-- is judged by `held`, which reads the record whole.
local r, reply = held(rec, ARGV[1], raw)
if not r then return reply end
local now = clock()
local expires_ms = math.floor((now + ARGV[3]) / 1000)
redis.call('SET', rec, build('c', r.on, r.fes, 0, expires_ms * 1000, now, r.fp, '', ARGV[2]),
  'PXAT', num(expires_ms))
return 'ok'
