-- Records the result of a claim and ends it; Redis itself removes the record at its expiry.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence, 16 digits as the record stores it (or as many as it has)
-- ARGV[2]  the encoded result
-- ARGV[3]  how long to keep it, in whole milliseconds ('0': not at all)
-- ARGV[4]  the same time in microseconds, 16 digits: the record's expiry field (RELATIVE)
--
-- Replies 'ok', 'lost' (not the current claim), or 'version:N' (written by a newer rerun).
--
-- No clock, no number read or formatted: the record's times are the time to live it is sent
-- with and Redis' own expiry of the key, which `PX` sets on the server's clock (see prelude.lua).
-- The time to live is never more than the one asked for: the client rounds it down to a whole
-- millisecond, the precision of Redis' expiry.
local rec = KEYS[1]
local raw = redis.pcall('GET', rec)
local done
-- The common case, read without `parse` and written without `build`: an in-progress record of
-- this format that carries the caller's fence, compared as the 16 digits it is stored as. A
-- completion keeps only the once flag, the fence and the fingerprint, which it copies as they
-- are stored, and writes every other field as a constant or as it was sent. On a Lua server
-- every library call costs, so this path makes as few as it can.
if type(raw) == 'string' and string.sub(raw, 1, 2) == FORMAT .. 'p'
    and #raw >= HEADER and string.sub(raw, 4, 19) == ARGV[1] then
  -- The same bytes as build('c', once, fence, 0, ARGV[4], RELATIVE, fingerprint, '', result);
  -- a test holds the two paths to each other (redis_store.rs).
  done = FORMAT .. 'c' .. string.sub(raw, 3, 19) .. ZERO .. ARGV[4] .. RELATIVE ..
    string.sub(raw, 68, 99) .. '0000' .. ARGV[2]
else
  -- Anything else (another state or fence, another format, a short record, a hash of rerun
  -- 0.1) is judged by `held`, which reads the record whole.
  local r, reply = held(rec, ARGV[1], raw)
  if not r then return reply end
  done = build('c', r.on, r.fes, 0, ARGV[4], RELATIVE, r.fp, '', ARGV[2])
end
if ARGV[3] == '0' then
  -- Kept for less than a millisecond: expired as it is written.
  redis.call('DEL', rec)
else
  redis.call('SET', rec, done, 'PX', ARGV[3])
end
return 'ok'
