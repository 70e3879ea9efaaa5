-- announce.lua: one gateway instance says it is alive, and learns how many
-- are. KEYS[1] is a sorted set of instance id -> expiry (µs of Redis TIME);
-- KEYS[2] a hash of instance id -> "SEEN INFO", SEEN the µs of Redis TIME
-- of the announcement and INFO what the instance says of itself. ARGV[1]
-- is the instance id, ARGV[2] how long the announcement lasts (µs), ARGV[3]
-- the info, written only when not empty.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
local pttl = math.ceil(ttl / 1000)
-- The dead instances' info goes with them, a few at a time so that a set
-- flooded by someone else costs each announcement little.
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('HDEL', KEYS[2], unpack(dead))
  redis.call('ZREM', KEYS[1], unpack(dead))
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
-- The set and the hash live as long as the longest announcement: one
-- with a shorter ttl must not end the others' with the keys. (PTTL is -1
-- for a key without a ttl, which gets one.)
local function keep(key)
  if redis.call('PTTL', key) < pttl then
    redis.call('PEXPIRE', key, pttl)
  end
end
keep(KEYS[1])
if ARGV[3] ~= '' then
  -- Built from TIME's strings: a number this large would be written
  -- with an exponent, and rounded.
  redis.call('HSET', KEYS[2], ARGV[1], t[1] .. string.format('%06d', tonumber(t[2])) .. ' ' .. ARGV[3])
  keep(KEYS[2])
end
return redis.call('ZCARD', KEYS[1])
