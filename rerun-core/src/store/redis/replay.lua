-- Put before the shared code in the claim script only (and at the start of the claim function,
-- whose shared code the library built when it was loaded). The record is read once, here: a
-- completed record of this format is returned as it is stored, before the shared code's
-- functions and tables are built (half a replay's server time), and the caller reads it with
-- the same checks as `parse` (`layout::parse`): a damaged one is corrupt, never replayed, and
-- the fingerprint decides between replay and mismatch. Anything else goes on to the full path
-- below, which reuses this read.
local PREFETCHED = redis.pcall('GET', KEYS[1])
if type(PREFETCHED) == 'string' then
  local format, state = string.byte(PREFETCHED, 1, 2)
  if format == @FORMAT_BYTE@ and state == 99 then return PREFETCHED end
end
