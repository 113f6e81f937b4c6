-- ferrolock force-unlock (protocol v2, see docs/PROTOCOL.md): administrative release
-- KEYS[1]  lock hash        <prefix>{<name>}
-- ARGV[1]  release channel  <prefix>{<name>}:released
-- ARGV[2]  optional: 'sharded' to publish with SPUBLISH (Redis Cluster) instead of PUBLISH
-- Returns {1, owner, count, fence} when a hold was deleted, {0} when the lock was free.
local hold = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
if not hold[1] then
  return {0}
end
redis.call('DEL', KEYS[1])
if ARGV[2] == 'sharded' then
  redis.call('SPUBLISH', ARGV[1], KEYS[1])
else
  redis.call('PUBLISH', ARGV[1], KEYS[1])
end
return {1, hold[1], hold[2], hold[3]}
