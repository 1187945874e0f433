-- Claim-or-fetch of one key in one atomic step: the transition table of
-- `rerun_core::record::decide`, judged on Redis' own clock.
--
-- KEYS[1]  the record (a hash)
-- ARGV[1]  the payload fingerprint (32 bytes)
-- ARGV[2]  the claiming holder (`Holder::encode`)
-- ARGV[3]  the lease, in microseconds
-- ARGV[4]  '1' for an at-most-once claim, else '0'
-- ARGV[5]  the fence whose holder the caller proved dead (steal), or ''
--
-- Replies:
--   {'claimed', fence[, abandoned fence, abandoned holder, '1' if its outcome is unknown]}
--   {'replay', fence, result} | {'mismatch'} | {'busy', fence, holder, lease left in us}
--   {'version', found} (written by a newer rerun) | {'corrupt', why}
local SCHEMA = @SCHEMA@
local rec = KEYS[1]
local fp, holder, lease_us, once, steal = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]

-- The clock is read inside the script, so the lease and expiry decisions below use the
-- server's clock at the very moment the record is read: no caller's clock, no gap between
-- reading and writing for another claim to slip through.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local r = redis.call('HMGET', rec, 'v', 'st', 'fe', 'fp', 'ho', 'on', 'lu', 'ex', 're')
local v, st, fe, rfp, ho, on, lu, ex, result = r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]

local prev = 0
local abandoned = nil
if st then
  -- A record of a newer rerun may mean something this script does not know: refuse, never
  -- overwrite it.
  local version = tonumber(v)
  if not version then return {'corrupt', 'the record has no schema version'} end
  if version > SCHEMA then return {'version', v} end
  prev = tonumber(fe)
  if not prev then return {'corrupt', 'the record has no fence'} end
  if st == 'released' or st == 'forgotten' then
    -- Free: only the fence is kept, so that the next token still grows.
  elseif st == 'completed' or st == 'unknown' or st == 'in_progress' then
    if not rfp or string.len(rfp) ~= 32 then
      return {'corrupt', 'the fingerprint is not 32 bytes'}
    end
    if st == 'completed' then
      local expires = tonumber(ex)
      if not expires then return {'corrupt', 'a completed record has no expiry'} end
      if not result then return {'corrupt', 'a completed record has no result'} end
      -- Redis drops the key at its expiry (in whole milliseconds); a record at or past its
      -- microsecond expiry is absent already, so that "exactly at expiry" is decided one way.
      if now < expires then
        if rfp ~= fp then return {'mismatch'} end
        return {'replay', fe, result}
      end
    elseif rfp ~= fp then
      return {'mismatch'}
    elseif st == 'unknown' then
      abandoned = {fe, ho or '', '1'}
    else
      local until_us = tonumber(lu)
      if not until_us then return {'corrupt', 'an in-progress record has no lease'} end
      -- A live lease is stolen only by a caller that proved this very fence's holder dead;
      -- a stale proof (the fence moved on) does not count.
      if now < until_us and steal ~= fe then
        return {'busy', fe, ho or '', string.format('%.0f', until_us - now)}
      end
      abandoned = {fe, ho or '', on == '1' and '1' or '0'}
    end
  else
    return {'corrupt', 'unknown status ' .. st}
  end
end

-- Tokens only grow: one more than the last token of this key (kept by released records and
-- forget's tombstones), and never below the server's clock in microseconds, which covers a
-- record that expired and took its token with it.
local fence = string.format('%.0f', math.max(prev + 1, now))
-- DEL first: the previous state's fields (result, expiry) and its TTL must not survive into
-- the claim; an in-progress record never expires by itself, or a dead at-most-once attempt
-- could be forgotten and run again.
redis.call('DEL', rec)
redis.call('HSET', rec, 'v', SCHEMA, 'st', 'in_progress', 'fe', fence, 'fp', fp, 'ho', holder,
  'on', once, 'lu', string.format('%.0f', now + lease_us))
if abandoned then
  return {'claimed', fence, abandoned[1], abandoned[2], abandoned[3]}
end
return {'claimed', fence}
