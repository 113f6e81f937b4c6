-- ferrolock raise-fence (protocol v2, see docs/PROTOCOL.md): Redlock's fencing write-back
-- KEYS[1]  lock hash        <prefix>{<name>}
-- KEYS[2]  fence counter    <prefix>{<name>}:fence
-- ARGV[1]  owner token
-- ARGV[2]  the granted fence T (decimal integer string, < 2^53)
-- ARGV[3]  fence counter idle retention in milliseconds (integer > 0)
-- Raises the counter to at least T (never lowers it), so that any later grant whose majority
-- meets this master gets a larger token; and, if ARGV[1] holds the lock here, records T as the
-- hold's fence. Returns {counter after, 1 if the hold's fence was set else 0}.
-- Comparisons use tonumber (exact below 2^53); the stored text is ARGV[2] itself, never a
-- number formatted by Lua.
local t = tonumber(ARGV[2])
local last = redis.call('GET', KEYS[2])
local counter = ARGV[2]
if last and tonumber(last) >= t then
  counter = last
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
else
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
local set = 0
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'fence', ARGV[2])
  set = 1
end
return {counter, set}
