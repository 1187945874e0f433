-- Extends a claim's lease to a full lease from now, on the server's clock.
--
-- KEYS[1]  the record
-- ARGV[1]  the claim's fence
-- ARGV[2]  the lease, in microseconds
--
-- Replies 'ok', 'lost' or 'version:N'.
local rec = KEYS[1]
-- Fenced: a holder whose lease already ran out and was taken over must not extend the
-- successor's lease; it learns of the takeover here.
local r, reply = held(rec, ARGV[1])
if not r then return reply end
redis.call('SET', rec, build('p', r.on, r.fes, clock() + tonumber(ARGV[2]), 0, r.ch, r.fp, r.ho, ''))
return 'ok'
