-- fleet.lua: what the live gateway instances announced (announce.lua).
-- KEYS[1] is the sorted set of instance id -> expiry, KEYS[2] the hash of
-- id -> "SEEN INFO". ARGV[1] bounds how many instances are read, ARGV[2]
-- how long an id or an entry may be: anyone who can write the keys can
-- plant entries, and the answer must stay small whatever they planted.
-- Returns {now, alive, skipped, id1, expiry1, entry1, id2, ...}, an entry
-- false when the instance announced no info.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local most, big = tonumber(ARGV[1]), tonumber(ARGV[2])
local alive = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, most)
local out = {now, alive, alive - #live / 2}
for i = 1, #live, 2 do
  local id = live[i]
  if #id > big then
    out[3] = out[3] + 1
  else
    local entry = redis.call('HGET', KEYS[2], id)
    if entry and #entry > big then
      out[3] = out[3] + 1
    else
      out[#out + 1] = id
      out[#out + 1] = live[i + 1]
      out[#out + 1] = entry
    end
  end
end
return out
