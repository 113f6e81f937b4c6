-- ferrolock release (protocol v1, see docs/PROTOCOL.md)
-- KEYS[1]  lock hash        <prefix>{<name>}
-- ARGV[1]  owner token
-- ARGV[2]  release channel  <prefix>{<name>}:released
-- ARGV[3]  the count to leave behind (integer >= 0). The caller passes its own count minus one,
--          so a retried release is idempotent; 0 deletes the hold (compare-and-delete).
-- ARGV[4]  optional: the fence of the hold the caller counts on. When the stored hold has
--          another fence it is a later grant to this token whose reply was lost (the counted
--          hold expired meanwhile): it is deleted outright instead of being left at ARGV[3].
--          An empty string is the same as absent (it keeps ARGV[5] in place).
-- ARGV[5]  optional: 'sharded' to announce the release with SPUBLISH (Redis Cluster, sharded
--          pub/sub) instead of PUBLISH.
-- Returns the remaining count (0: deleted and published), or -1 when ARGV[1] does not hold it.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -1
end
local count = tonumber(ARGV[3])
if count > 0 and ARGV[4] and ARGV[4] ~= '' and tonumber(redis.call('HGET', KEYS[1], 'fence')) ~= tonumber(ARGV[4]) then
  count = 0
end
if count > 0 then
  redis.call('HSET', KEYS[1], 'count', count)
  return count
end
redis.call('DEL', KEYS[1])
if ARGV[5] == 'sharded' then
  redis.call('SPUBLISH', ARGV[2], KEYS[1])
else
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 0
