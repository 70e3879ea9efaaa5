-- protect.lua: the reports of the instances that protect one upstream
-- together. KEYS[1] is a hash: instance id -> "MS REPORT", MS being when
-- the report was written (Redis TIME, in ms). The script writes the
-- caller's report (ARGV[2] empty: the caller is leaving, and its field
-- goes; "?": it only reads, as it enters), drops the fields older than the
-- ttl (their instance died), and returns the others': {id, age in ms,
-- report, ...}.
--
-- ARGV: 1 the caller's id, 2 its report, 3 ttl (ms), 4 the store's clock
-- offset (ms), which only tests set, 5 the most fields returned.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[4])
local ttl = tonumber(ARGV[3])
local most = tonumber(ARGV[5])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {}
end
if ARGV[2] ~= '?' then
  redis.call('HSET', KEYS[1], ARGV[1], now .. ' ' .. ARGV[2])
end
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local id, v = all[i], all[i + 1]
  local at = tonumber(string.match(v, '^(%d+) '))
  -- A report from the future (someone else's write, or a clock far off)
  -- would never expire: it goes too.
  if at == nil or now - at > ttl or at - now > ttl then
    redis.call('HDEL', KEYS[1], id)
  elseif id ~= ARGV[1] and #out < 3 * most then
    out[#out + 1] = id
    out[#out + 1] = math.max(now - at, 0)
    out[#out + 1] = string.sub(v, #tostring(at) + 2)
  end
end
-- The hash outlives its fleet by a while; every report refreshes it.
redis.call('PEXPIRE', KEYS[1], 20 * ttl)
return out
