-- ferrolock acquire (protocol v2, see docs/PROTOCOL.md)
-- KEYS[1]  lock hash        <prefix>{<name>}
-- KEYS[2]  fence counter    <prefix>{<name>}:fence
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds (integer > 0)
-- ARGV[3]  fence counter idle retention in milliseconds (integer > 0)
-- ARGV[4]  maximum reentrancy depth (integer > 0)
-- Fair mode only (all three present, see docs/PROTOCOL.md "Fair mode"):
-- KEYS[3]  waiter queue     <prefix>{<name>}:queue    (list of tokens, arrival order)
-- KEYS[4]  waiter table     <prefix>{<name>}:waiters  (hash token -> "<stay until, server ms>:<lease ms>")
-- ARGV[5]  the caller's remaining wait in milliseconds (integer > 0): when the lock is held, the
--          caller joins the queue (or refreshes its place) and a release hands the lock to it
-- Redlock only (optional; ARGV[5] is then ignored, send an empty string):
-- ARGV[6]  fence floor in microseconds, the same for every master of one round: a fresh grant
--          takes it when it is above the fencing rule's value and at most 60 s ahead of this
--          server's TIME, so that a quorum grants one and the same fence (no write-back round)
-- ARGV[7]  optional: 'reenter' for a Redlock re-entry round: where the caller's hold is gone (the
--          key is free), make nothing and reply {3}, so that a round that is undone leaves no
--          fresh hold behind that a later re-entry would count as one that survived
-- ARGV[8]  optional, fair mode: the lease a hand-over gives the caller (written into its queue
--          entry instead of ARGV[2]): a short offer that the caller confirms with extend once
--          it reads the grant, so that a stale entry (a waiter that died or never left) holds
--          the lock only that long. Absent or empty: ARGV[2] (clients before this addition).
-- Returns {1, fence, count}  granted (fresh hold or re-entry by the same owner)
--         {0, pttl}          held by another owner (pttl = -1: the hold has no expiry)
--         {0, pttl, fence}   the same, in fair mode: `fence` is the holder's (a grant message
--                            naming the caller with a fence not above it is older than this try)
--         {2, count}         re-entry refused: the depth limit is reached; nothing changed
--         {3}                ARGV[7] = 'reenter' and the key is free: nothing changed
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  local count = tonumber(redis.call('HGET', KEYS[1], 'count'))
  if count >= tonumber(ARGV[4]) then
    return {2, count}
  end
  count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('HGET', KEYS[1], 'fence'), count}
end
if owner then
  local pttl = redis.call('PTTL', KEYS[1])
  if KEYS[4] then
    -- Queued until the caller would have tried again (it wakes at the holder's pttl at the
    -- latest, or after 1 s for a hold without expiry) plus 2 s of slack, or its own deadline.
    if redis.replicate_commands and not redis.REDIS_VERSION_NUM then
      pcall(redis.replicate_commands)
    end
    local now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    local stay = math.min(tonumber(ARGV[5]), math.max(pttl, 1000) + 2000)
    if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 0 then
      redis.call('RPUSH', KEYS[3], ARGV[1])
    end
    local offer = tonumber(ARGV[8] or '') or tonumber(ARGV[2])
    redis.call('HSET', KEYS[4], ARGV[1], string.format('%d:%d', now_ms + stay, offer))
    for _, k in ipairs({KEYS[3], KEYS[4]}) do
      if redis.call('PTTL', k) < stay + 1000 then
        redis.call('PEXPIRE', k, stay + 1000)
      end
    end
    return {0, pttl, redis.call('HGET', KEYS[1], 'fence')}
  end
  return {0, pttl}
end
if ARGV[7] == 'reenter' then
  return {3}
end
if KEYS[4] and redis.call('HDEL', KEYS[4], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[3], 0, ARGV[1]) -- granted while free: out of the queue
end

-- A new grant: fence = max(last + 1, server TIME in microseconds[, the Redlock floor]).
-- Lua numbers are doubles, exact for integers below 2^53; the value is written with '%d',
-- never with Lua's default '%.14g' number-to-string conversion. This path runs on every grant,
-- so it lets arithmetic convert the strings (one strtod; tonumber() runs two) and passes the
-- count as text (a number argument is formatted with '%.14g'): bench/README, "script cost".
local fence = 1
local last = redis.call('GET', KEYS[2])
if last then
  fence = last + 1
end
-- Redis 7 (which defines REDIS_VERSION_NUM) replicates effects only; older servers need the call.
if redis.replicate_commands and not redis.REDIS_VERSION_NUM then
  pcall(redis.replicate_commands)
end
local ok, now = pcall(redis.call, 'TIME')
if ok then
  local micros = now[1] * 1000000 + now[2]
  if micros > fence then
    fence = micros
  end
  local floor = ARGV[6] and tonumber(ARGV[6])
  if floor and floor > fence and floor <= micros + 60000000 then
    fence = floor
  end
end
if fence >= 9007199254740992 then
  return redis.error_reply('ERR ferrolock fence counter exhausted (2^53)')
end
fence = string.format('%d', fence)
redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', '1', 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence, 1}
