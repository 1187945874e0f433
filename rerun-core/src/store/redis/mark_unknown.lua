-- Marks a claim's outcome unknown: an at-most-once body may have run, its result was not
-- recorded. The record keeps no expiry, so that only an operator's forget runs the key again.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
--
-- Replies 'ok', 'lost' or 'version:N'.
local rec = KEYS[1]
-- Fenced: a zombie must not turn its successor's live claim into an unknown outcome.
local r, reply = held(rec, ARGV[1])
if not r then return reply end
redis.call('SET', rec, build('u', r.on, r.fes, 0, 0, clock(), r.fp, r.ho, ''))
return 'ok'
