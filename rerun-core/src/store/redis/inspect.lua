-- Reads one record without changing it, with the server's clock in the same step, so that
-- the lease and expiry left are measured on the clock that decides them.
--
-- KEYS[1]  the record
--
-- Reply: {now in us, Redis type of the key, v, st, fe, fp, ho, on, lu, ex, re}
local rec = KEYS[1]
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local kind = redis.call('TYPE', rec)['ok']
if kind ~= 'hash' then return {now, kind} end
local r = redis.call('HMGET', rec, 'v', 'st', 'fe', 'fp', 'ho', 'on', 'lu', 'ex', 're')
return {now, kind, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]}
