-- ferrolock force-unlock (protocol v2, see docs/PROTOCOL.md): administrative release
-- KEYS[1]  lock hash        <prefix>{<name>}
-- ARGV[1]  release channel  <prefix>{<name>}:released
-- ARGV[2]  optional: 'sharded' to publish with SPUBLISH (Redis Cluster) instead of PUBLISH; an
--          empty string is the same as absent (it keeps ARGV[3] in place)
-- Fair mode (optional, all present; see docs/PROTOCOL.md "Fair mode"):
-- KEYS[2]  fence counter    <prefix>{<name>}:fence
-- KEYS[3]  waiter queue     <prefix>{<name>}:queue
-- KEYS[4]  waiter table     <prefix>{<name>}:waiters
-- ARGV[3]  fence counter idle retention in milliseconds (integer > 0)
-- With waiters queued, the lock goes to the oldest live one exactly as a release hands it on
-- (release.lua), and the message is 'G:<token>:<fence>:<lease ms>'. The hand-on loop repeats
-- release.lua's on purpose: a script cannot call another (shared code needs Redis 7 functions,
-- which the supported servers do not all have); core/tests/fair.rs checks both hand on alike.
-- Returns {1, owner, count, fence, pttl} when a hold was deleted (pttl: what was left of its
-- lease, -1 for none; clients before pttl was added read the first four), {0} when the lock was
-- free.
local hold = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence')
if not hold[1] then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
local message = KEYS[1]
-- PTTL (in the basic ACL rule set, docs/SECURITY.md) tells whether a queue exists (-2: no key;
-- fair mode's keys always carry an expiry): users without fair mode's commands never go further.
if KEYS[4] and redis.call('PTTL', KEYS[3]) ~= -2 then
  if redis.replicate_commands and not redis.REDIS_VERSION_NUM then
    pcall(redis.replicate_commands)
  end
  local now = redis.call('TIME')
  local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  while true do
    local waiter = redis.call('LPOP', KEYS[3])
    if not waiter then
      break
    end
    local entry = redis.call('HGET', KEYS[4], waiter)
    if entry then
      redis.call('HDEL', KEYS[4], waiter)
      local stay, lease = string.match(entry, '^(%d+):(%d+)$')
      if stay and tonumber(stay) * 1000 > now_us then
        local fence = now_us
        local last = redis.call('GET', KEYS[2])
        if last and tonumber(last) + 1 > fence then
          fence = tonumber(last) + 1
        end
        if fence >= 9007199254740992 then
          return redis.error_reply('ERR ferrolock fence counter exhausted (2^53)')
        end
        fence = string.format('%d', fence)
        redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
        redis.call('HSET', KEYS[1], 'owner', waiter, 'count', 1, 'fence', fence)
        redis.call('PEXPIRE', KEYS[1], lease)
        message = 'G:' .. waiter .. ':' .. fence .. ':' .. lease
        break
      end
    end
  end
end
if ARGV[2] == 'sharded' then
  redis.call('SPUBLISH', ARGV[1], message)
else
  redis.call('PUBLISH', ARGV[1], message)
end
return {1, hold[1], hold[2], hold[3], pttl}
