-- ferrolock extend (protocol v2, see docs/PROTOCOL.md); also the watchdog's renewal
-- KEYS[1]  lock hash        <prefix>{<name>}
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds (integer > 0)
-- Returns 1 when extended, 0 when ARGV[1] does not hold the lock (nothing changed).
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
