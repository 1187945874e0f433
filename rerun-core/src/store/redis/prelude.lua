-- Shared by every script (prepended when the scripts are loaded; the top level of the library
-- when they are functions): the record layout, and the upgrade of a record written by rerun 0.1
-- (a hash) to it.
--
-- One string per record, so that every script reads the record with one GET and writes it with
-- one SET, and a completed record is replayed without reading the clock:
--
--   1        format ('2')
--   2        state: p in progress, c completed, r released, u unknown, f forgotten (tombstone)
--   3        '1' for an at-most-once claim, else '0'
--   4..19    fence, 16 decimal digits
--   20..35   lease end, microseconds on Redis' clock (0: none)
--   36..51   expiry, microseconds (0: none; Redis expires the key at the same instant)
--   52..67   when the record entered its state, microseconds
--   68..99   payload fingerprint, 32 bytes
--   100..103 length of the holder, 4 digits
--   then the holder (`Holder::encode`), then the result (the rest)
--
-- A completion reads no clock: it writes its time to live in the expiry field (whole
-- milliseconds, in microseconds), RELATIVE where "changed" would be, and leaves the instant to
-- Redis' own expiry of the key (`PX`), from which a reader takes both (see inspect.lua). A
-- completed record without RELATIVE (completed before completions read no clock, or upgraded
-- from rerun 0.1) has its expiry as an instant. RELATIVE is above every instant a field holds
-- (WIDEST), so no record of either kind is read as the other; a build that does not know it
-- shows such a record with no time left and an age of zero, and reads the rest as before.
local FORMAT = '@FORMAT@'
local HEADER = 103
local RELATIVE = '9999999999999999'

-- Formatting a number is most of the cost of writing a record, so a zero is a constant, a
-- field read from a record is written back as it was read, and numbers are formatted as
-- integers ('%d': a C integer conversion, a third of the time of '%.0f', which goes through
-- the floating-point printer). Every number here is a whole one below 2^53 (fields are capped
-- at WIDEST, spans at the client), so the conversion to a C long is exact.
local ZERO = '0000000000000000'
local function pad(n)
  if type(n) == 'string' then return n end
  if n == 0 then return ZERO end
  return string.format('%016d', n)
end

-- Numbers are numbers or 16-digit fields (`pad`).
local function build(st, on, fe, lu, ex, ch, fp, ho, re)
  local hl = #ho
  return FORMAT .. st .. on .. pad(fe) .. pad(lu) .. pad(ex) .. pad(ch) .. fp ..
    (hl == 0 and '0000' or string.format('%04d', hl)) .. ho .. re
end

-- The record's fields, or nil and why ('version' and the format found, or a reason).
local function parse(raw)
  local v = string.sub(raw, 1, 1)
  if v ~= FORMAT then
    if tonumber(v) and tonumber(v) > tonumber(FORMAT) then return nil, 'version', v end
    return nil, 'the record has an unknown format'
  end
  if #raw < HEADER then return nil, 'the record is shorter than its header' end
  -- Every number is all digits, as the Rust side reads it: `tonumber` alone would take a
  -- damaged field (' 12', '0x1f', '1e5') for a number, and act on a record the Rust side
  -- calls corrupt. (Literal patterns: built at compile time, not on every call.)
  if not string.find(raw, '^%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d', 4)
    or not string.find(raw, '^%d%d%d%d', 100) then
    return nil, 'a number in the record is malformed'
  end
  -- fes: the fence as stored, to be written back unformatted.
  local fes = string.sub(raw, 4, 19)
  local r = {
    st = string.sub(raw, 2, 2), on = string.sub(raw, 3, 3),
    fe = tonumber(fes), fes = fes, lu = tonumber(string.sub(raw, 20, 35)),
    ex = tonumber(string.sub(raw, 36, 51)), ch = tonumber(string.sub(raw, 52, 67)),
    fp = string.sub(raw, 68, 99),
  }
  local hl = tonumber(string.sub(raw, 100, 103))
  if not (r.fe and r.lu and r.ex and r.ch and hl) then
    return nil, 'a number in the record is malformed'
  end
  if #raw < HEADER + hl then return nil, 'the record is truncated' end
  r.ho = string.sub(raw, HEADER + 1, HEADER + hl)
  r.re = string.sub(raw, HEADER + hl + 1)
  return r
end

-- A record of rerun 0.1 (a hash) as a record of this layout, written in its place with the
-- time it had left; nil if the key holds anything else.
-- The largest number a field of 16 digits holds that a Lua number keeps exactly (2^53 - 1
-- microseconds: the year 2255).
local WIDEST = 9007199254740991
local function upgrade(rec)
  if redis.call('TYPE', rec)['ok'] ~= 'hash' then return nil end
  local h = redis.call('HMGET', rec, 'v', 'st', 'fe', 'fp', 'ho', 'on', 'lu', 'ex', 're')
  -- Built here, not with the shared code: every script would pay for a table only an upgrade reads.
  local STATES = {in_progress = 'p', completed = 'c', released = 'r', unknown = 'u', forgotten = 'f'}
  local st = STATES[h[2] or '']
  local fe = tonumber(h[3])
  if not st or not fe or fe < 0 or fe > WIDEST or tonumber(h[1] or '') ~= 1 then return nil end
  local fp = h[4] or string.rep('\0', 32)
  if #fp ~= 32 then return nil end
  -- A lease end or an expiry beyond the field's width means "never" in practice: kept as the
  -- widest value, never written across the next field.
  local lu = math.max(0, math.min(tonumber(h[7]) or 0, WIDEST))
  local ex = math.max(0, math.min(tonumber(h[8]) or 0, WIDEST))
  local raw = build(st, h[6] == '1' and '1' or '0', fe, lu, ex, 0, fp, h[5] or '', h[9] or '')
  local ttl = redis.call('PTTL', rec)
  redis.call('DEL', rec)
  if ttl > 0 then
    redis.call('SET', rec, raw, 'PX', ttl)
  else
    redis.call('SET', rec, raw)
  end
  return raw
end

-- The record's string (false when absent), or nil and 'wrongtype'. `got`: the reply of a GET
-- of `rec` this script already made, if any.
local function load(rec, got)
  local raw = got
  if raw == nil then raw = redis.pcall('GET', rec) end
  if type(raw) == 'table' and raw.err then
    raw = upgrade(rec)
    if not raw then return nil, 'wrongtype' end
  end
  return raw
end

-- Redis' clock in microseconds. Arithmetic converts the reply's two strings itself, once each:
-- `tonumber` converts a string twice in Lua 5.1 (it checks, then converts), and every
-- conversion is a call of the C library's `strtod`.
local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

local function num(n)
  return string.format('%d', n)
end

-- The claim a fenced script acts for: the record, or a reply ('lost', 'version:N'). `got`: the
-- reply of a GET of `rec` this script already made, if any.
local function held(rec, fence, got)
  local raw, err = load(rec, got)
  if err or not raw then return nil, 'lost' end
  local r, why, v = parse(raw)
  if not r then
    if why == 'version' then return nil, 'version:' .. v end
    return nil, 'lost'
  end
  -- The fence check: a zombie whose claim was taken over (the record carries a greater
  -- fence), released or completed must not change its successor's record.
  if r.st ~= 'p' or r.fe ~= tonumber(fence) then return nil, 'lost' end
  return r
end
