-- ferrolock acquire (protocol v1, see docs/PROTOCOL.md)
-- KEYS[1]  lock hash        <prefix>{<name>}
-- KEYS[2]  fence counter    <prefix>{<name>}:fence
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds (integer > 0)
-- ARGV[3]  fence counter idle retention in milliseconds (integer > 0)
-- ARGV[4]  maximum reentrancy depth (integer > 0)
-- Returns {1, fence, count}  granted (fresh hold or re-entry by the same owner)
--         {0, pttl}          held by another owner (pttl = -1: the hold has no expiry)
--         {2, count}         re-entry refused: the depth limit is reached; nothing changed
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
  return {0, redis.call('PTTL', KEYS[1])}
end

-- A new grant: fence = max(last + 1, server TIME in microseconds).
-- Lua numbers are doubles, exact for integers below 2^53; the value is written with '%d',
-- never with Lua's default '%.14g' number-to-string conversion.
local fence = 1
local last = redis.call('GET', KEYS[2])
if last then
  fence = tonumber(last) + 1
end
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end
local ok, now = pcall(redis.call, 'TIME')
if ok then
  local micros = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if micros > fence then
    fence = micros
  end
end
if fence >= 9007199254740992 then
  return redis.error_reply('ERR ferrolock fence counter exhausted (2^53)')
end
fence = string.format('%d', fence)
redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence, 1}
