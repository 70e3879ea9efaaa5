-- versioned.lua: one change to a versioned set (the gateway's runtime
-- overrides). KEYS[1] is a hash: "_epoch" names this set's life (a set
-- that Redis lost and made again has another), "_version" counts the
-- changes, and each entry is "e:" .. NAME -> "EXPIRES VALUE", EXPIRES the
-- ms of Redis TIME after which the entry is gone (0: never).
--
-- ARGV[1] is put or del; ARGV[2] the entry's name; ARGV[3] its value (put);
-- ARGV[4] its ttl in ms (put; 0: none); ARGV[5] an epoch for a new set;
-- ARGV[6] the channel that learns each new version; ARGV[7] the most
-- entries the set may hold.
--
-- With ARGV[1] read it changes nothing, and only answers.
--
-- It answers {changed, now, replaced, epoch, version, name1, value1, ...}:
-- whether a change was made (a del of an absent entry is none, and makes
-- no version), the ms of Redis TIME, the value the change replaced or
-- removed (false: none), and the set after it, without the entries that
-- are gone.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A version that is not a number fails here, before anything is written.
local cur = redis.call('HGET', KEYS[1], '_version')
if cur and not string.match(cur, '^%d+$') then
  return redis.error_reply('BADVERSION the set\'s version ' .. string.sub(cur, 1, 40) .. ' is not a number')
end
local function answer(changed, replaced)
  local out = {changed, now, replaced, redis.call('HGET', KEYS[1], '_epoch') or '', redis.call('HGET', KEYS[1], '_version') or '0'}
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'e:' then
      out[#out + 1] = string.sub(all[i], 3)
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end
if ARGV[1] == 'read' then
  return answer(0, false)
end
redis.call('HSETNX', KEYS[1], '_epoch', ARGV[5])
local name = 'e:' .. ARGV[2]
local all = redis.call('HGETALL', KEYS[1])
local live = 0
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'e:' then
    local exp = tonumber(string.match(all[i + 1], '^(%d+) '))
    if exp == nil or (exp > 0 and exp <= now) then
      redis.call('HDEL', KEYS[1], f)
    elseif f ~= name then
      live = live + 1
    end
  end
end
local replaced = redis.call('HGET', KEYS[1], name)
local changed = 1
if ARGV[1] == 'put' then
  if live >= tonumber(ARGV[7]) then
    return redis.error_reply('FULL the set holds ' .. live .. ' entries, the most it may')
  end
  local ttl = tonumber(ARGV[4])
  local exp = 0
  if ttl > 0 then
    exp = now + ttl
  end
  -- Written from integers, not as a float with an exponent.
  redis.call('HSET', KEYS[1], name, string.format('%d', exp) .. ' ' .. ARGV[3])
else
  changed = redis.call('HDEL', KEYS[1], name)
end
if changed == 1 then
  local v = redis.call('HINCRBY', KEYS[1], '_version', 1)
  redis.call('PUBLISH', ARGV[6], tostring(v))
end
return answer(changed, replaced)
