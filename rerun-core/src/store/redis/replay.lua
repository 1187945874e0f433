-- Put before the shared code in the claim script only: the replay path, answered from one GET
-- before the shared code's functions and tables are built (a third of a replay's server time).
-- It answers exactly what the full path below would for a well-formed completed record of this
-- format (the same checks as `parse`); anything else falls through to the full path.
do
  local raw = redis.pcall('GET', KEYS[1])
  if type(raw) == 'string' and string.sub(raw, 1, 2) == '@FORMAT@c' and string.len(raw) >= 103 then
    local fe, hl = tonumber(string.sub(raw, 4, 19)), tonumber(string.sub(raw, 100, 103))
    if fe and hl and tonumber(string.sub(raw, 20, 35)) and tonumber(string.sub(raw, 36, 51))
        and tonumber(string.sub(raw, 52, 67)) and string.len(raw) >= 103 + hl then
      if string.sub(raw, 68, 99) ~= ARGV[1] then return {'mismatch'} end
      return {'replay', string.format('%.0f', fe), string.sub(raw, 104 + hl)}
    end
  end
end
