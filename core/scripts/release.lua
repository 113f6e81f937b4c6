-- ferrolock release (protocol v2, see docs/PROTOCOL.md)
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
-- Fair mode only (all present, see docs/PROTOCOL.md "Fair mode"):
-- KEYS[2]  fence counter    <prefix>{<name>}:fence
-- KEYS[3]  waiter queue     <prefix>{<name>}:queue
-- KEYS[4]  waiter table     <prefix>{<name>}:waiters
-- ARGV[6]  fence counter idle retention in milliseconds (integer > 0)
-- In fair mode ARGV[1] first leaves the queue (a waiter giving up releases with count 0), and
-- a deleted hold is handed to the oldest queued waiter whose stay has not run out: it becomes
-- the owner (count 1, a new fence, its own lease) and the message is 'G:<token>:<fence>:<lease ms>'.
-- Returns the remaining count (0: deleted and published), or -1 when ARGV[1] does not hold it.
if KEYS[4] and redis.call('HDEL', KEYS[4], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -1
end
local count = ARGV[3] == '0' and 0 or tonumber(ARGV[3]) -- '0' (a full release) is the common case
if count > 0 and ARGV[4] and ARGV[4] ~= '' and tonumber(redis.call('HGET', KEYS[1], 'fence')) ~= tonumber(ARGV[4]) then
  count = 0
end
if count > 0 then
  redis.call('HSET', KEYS[1], 'count', count)
  return count
end
redis.call('DEL', KEYS[1])
local message = KEYS[1]
if KEYS[4] then
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
        -- The acquire script's fence rule: max(last + 1, server TIME in microseconds).
        local fence = now_us
        local last = redis.call('GET', KEYS[2])
        if last and tonumber(last) + 1 > fence then
          fence = tonumber(last) + 1
        end
        if fence >= 9007199254740992 then
          return redis.error_reply('ERR ferrolock fence counter exhausted (2^53)')
        end
        fence = string.format('%d', fence)
        redis.call('SET', KEYS[2], fence, 'PX', ARGV[6])
        redis.call('HSET', KEYS[1], 'owner', waiter, 'count', 1, 'fence', fence)
        redis.call('PEXPIRE', KEYS[1], lease)
        message = 'G:' .. waiter .. ':' .. fence .. ':' .. lease
        break
      end
    end
  end
end
if ARGV[5] == 'sharded' then
  redis.call('SPUBLISH', ARGV[2], message)
else
  redis.call('PUBLISH', ARGV[2], message)
end
return 0
