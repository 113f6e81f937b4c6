-- ferrolock inspect (protocol v2, see docs/PROTOCOL.md): read-only snapshot of one lock
-- KEYS[1]  lock hash        <prefix>{<name>}
-- KEYS[2]  fence counter    <prefix>{<name>}:fence
-- Returns {held, owner, count, fence, pttl, last_fence}; held = 0 leaves owner/count/fence false.
local hold = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
local last = redis.call('GET', KEYS[2])
if not hold[1] then
  return {0, false, false, false, -2, last}
end
return {1, hold[1], hold[2], hold[3], redis.call('PTTL', KEYS[1]), last}
