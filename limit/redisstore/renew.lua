-- renew.lua: extends one lease on concurrency limits (limit.Rule.Renew).
--
-- KEYS[i] is the lease set of limit i. ARGV:
--   1 clock offset, µs, added to TIME (0 outside tests)
--   2 lease id
--   2+i lease ttl of limit i, µs

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
local lease = ARGV[2]
for i = 1, #KEYS do
  local key = KEYS[i]
  local ttl = tonumber(ARGV[2 + i])
  -- A lease is renewed only while its set is live (some lease runs past
  -- now): a set whose leases have all run out is expired state, and
  -- renewing it would resurrect a lease the others have stopped counting.
  if redis.call('ZSCORE', key, lease) then
    local top = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
    if top > now then
      redis.call('ZADD', key, 'XX', now + ttl, lease)
      local want = math.max(math.ceil(ttl / 1000), 1)
      if redis.call('PTTL', key) < want then redis.call('PEXPIRE', key, want) end
    end
  end
end
return 1
