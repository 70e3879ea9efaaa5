-- announce.lua: one gateway instance says it is alive, and learns how many
-- are. KEYS[1] is a sorted set of instance id -> expiry (µs of Redis TIME);
-- ARGV[1] the instance id, ARGV[2] how long the announcement lasts (µs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
-- The set lives as long as its newest announcement.
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
return redis.call('ZCARD', KEYS[1])
