-- Claim-or-fetch of one key in one atomic step: the transition table of
-- `rerun_core::record::decide`, judged on Redis' own clock.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim, packed: '1' for an at-most-once claim or '0' (1 byte), the lease in
--          microseconds (16 digits, zero-padded), then the record's tail as a claim writes
--          it: the payload fingerprint (32 bytes), the holder's length (4 digits) and the
--          claiming holder (`Holder::encode`, the rest)
-- ARGV[2]  the fence whose holder the caller proved dead (steal) (absent: '')
--
-- One packed argument, and the steal only when there is one: Redis makes a Lua string of
-- every argument before the function runs, a replay included, which reads none of them.
--
-- Replies:
--   fence, an integer: claimed, nothing abandoned (the most frequent answer, and the cheapest
--   to send: no table to build)
--   {'claimed', fence, abandoned fence, abandoned holder, '1' if its outcome is unknown}
--   the record itself, when it is completed (see replay.lua)
--   {'replay', fence, result} | {'mismatch'} | {'busy', fence, holder, lease left in us}
--   {'version', found} (written by a newer rerun) | {'corrupt', why}
local rec = KEYS[1]
-- The lease stays a string until the one sum that needs it as a number (see `clock`).
local packed = ARGV[1]
local once, lease_us = string.sub(packed, 1, 1), string.sub(packed, 2, 17)
local steal = ARGV[2] or ''

-- PREFETCHED: the GET made before the shared code (replay.lua).
local raw, err = load(rec, PREFETCHED)
if err then return {'corrupt', 'the key holds another type than rerun\'s record'} end
if not raw then
  -- No record, the most frequent claim, written without `build`: its fence is the clock (see
  -- below, where `prev` would be 0), and its record is the same bytes as build('p', once, now,
  -- now + lease_us, 0, now, fp, holder, ''): its numbers in one format, and its tail (the
  -- fingerprint and the holder with its length) as the client packed it. A test holds the
  -- two paths to each other (redis_store.rs).
  local now = clock()
  redis.call('SET', rec, FORMAT .. 'p' .. once ..
    string.format('%016d%016d0000000000000000%016d', now, now + lease_us, now) ..
    string.sub(packed, 18))
  return now
end
local fp, holder = string.sub(packed, 18, 49), string.sub(packed, 54)
local r = nil
if raw then
  local why, v
  r, why, v = parse(raw)
  if not r then
    if why == 'version' then return {'version', v} end
    return {'corrupt', why}
  end
  -- The replay path reads no clock: Redis removes a completed record at its expiry, so a
  -- completed record that is there has not expired.
  if r.st == 'c' then
    if r.fp ~= fp then return {'mismatch'} end
    return {'replay', r.fes, r.re}
  end
end

-- The clock is read inside the script, so the lease decisions below use the server's clock at
-- the very moment the record is read: no caller's clock, no gap between reading and writing.
local now = clock()
local prev = 0
local abandoned = nil
if r then
  prev = r.fe
  if r.st == 'r' or r.st == 'f' then
    -- Free: only the fence is kept, so that the next token still grows.
  elseif r.fp ~= fp then
    return {'mismatch'}
  elseif r.st == 'u' then
    abandoned = {num(r.fe), r.ho, '1'}
  elseif r.st == 'p' then
    -- A live lease is stolen only by a caller that proved this very fence's holder dead; a
    -- stale proof (the fence moved on) does not count.
    if now < r.lu and steal ~= num(r.fe) then
      return {'busy', num(r.fe), r.ho, num(r.lu - now)}
    end
    abandoned = {num(r.fe), r.ho, r.on == '1' and '1' or '0'}
  else
    return {'corrupt', 'unknown state ' .. r.st}
  end
end

-- Tokens only grow: one more than the last token of this key (kept by released records and
-- forget's tombstones), and never below the server's clock in microseconds, which covers a
-- record that expired and took its token with it.
local fence = math.max(prev + 1, now)
-- A fresh key's fence is the clock: one field formatted for both (the reply's fence is the
-- field, leading zeros and all).
local at = pad(now)
local fe = fence == now and at or pad(fence)
-- A plain SET drops the previous state's expiry: an in-progress record never expires by
-- itself, or a dead at-most-once attempt could be forgotten and run again.
-- An attempt whose outcome is unknown is taken over at most once, whatever this claim's mode:
-- if this claim dies too, the next one still finds the outcome unknown.
local stays = once
if abandoned and abandoned[3] == '1' then stays = '1' end
redis.call('SET', rec, build('p', stays, fe, now + lease_us, 0, at, fp, holder, ''))
if abandoned then
  return {'claimed', fe, abandoned[1], abandoned[2], abandoned[3]}
end
return fence
