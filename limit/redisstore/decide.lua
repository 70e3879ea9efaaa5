-- decide.lua: the four algorithms of limit/algorithm.go, on Redis state.
--
-- KEYS[i] is the state of limit i. ARGV (layout in doc.go):
--   1 mode: "d" decides every limit, "p" peeks at the one limit
--   2 clock offset, µs, added to TIME (0 outside tests)
--   3 token: makes sliding-window log members unique per decision
--   4 lease id of concurrency limits
--   then 8 per limit: algorithm, shadow, n, window|lease ttl, tokens per µs,
--   queue, cost, zone offset
--
-- Numbers are Lua doubles. Every time here is an integer number of µs below
-- 2^53, so it is exact; big numbers go to redis.call as numbers (Redis
-- prints them exactly) and never through tostring (%.14g).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[2])
local EPS = 1e-9 -- limit.tokenEpsilon
local BASE, STRIDE = 4, 8

-- A key's PEXPIRE for state that matters for us more µs; Redis takes
-- whole milliseconds, and 0 would delete the key.
local function ms(us)
  local m = math.ceil(us / 1000)
  if m < 1 then m = 1 end
  return m
end

-- fill is how long a bucket holding tokens takes to be full, in µs.
local function fill(n, per, tokens)
  local missing = n - tokens
  if missing <= EPS then return 0 end
  return math.ceil(missing / per)
end

-- window returns the current fixed window's start, its count, and whether
-- the stored window is the current one.
local function window(key, first, w, off)
  local h = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(h[1]), tonumber(h[2])
  if first then
    if s and c and s + w > now then return s, c, true end
    return now, 0, false
  end
  -- fmod is exact where a floor of a quotient could round up.
  local x = now + off
  local m = math.fmod(x, w)
  if m < 0 then m = m + w end
  local start = x - m - off
  if c and s == start then return start, c, true end
  return start, 0, false
end

-- bucket returns the tokens at now and the time they are counted at. The
-- stored state is live until the bucket would be full again; a clock that
-- stepped back refills nothing and does not move the bucket's time back,
-- or the next refill would count the same time twice.
local function bucket(key, n, per)
  local h = redis.call('HMGET', key, 't', 'ts')
  local tk, ts = tonumber(h[1]), tonumber(h[2])
  if tk and ts and ts + math.max(fill(n, per, tk), 1) > now then
    local el = now - ts
    if el < 0 then el = 0 end
    return math.min(n, tk + el * per), math.max(ts, now)
  end
  return n, now
end

-- Admissions at or before now - w have left the sliding window, and leases
-- at or before now have expired: removing them is the only write a
-- rejected request makes.
local function logged(key, w)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
  return redis.call('ZCARD', key)
end

local function leases(key)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- score of the entry at rank k (0 is the oldest, -1 the newest)
local function score(key, k)
  return tonumber(redis.call('ZRANGE', key, k, k, 'WITHSCORES')[2])
end

local sec = math.floor(now / 1000000)
local usec = now - sec * 1000000

if ARGV[1] == 'p' then
  local key, j = KEYS[1], BASE
  local alg = ARGV[j + 1]
  local n, w = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
  local rem, reset, inflight = 0, 0, 0
  if alg == 'f' or alg == 'F' then
    local start, cur, live = window(key, alg == 'F', w, tonumber(ARGV[j + 8]))
    rem = n - cur
    if alg == 'f' or live then reset = start + w - now end
  elseif alg == 's' then
    local count = logged(key, w)
    rem = math.max(n - count, 0)
    if count > 0 then reset = score(key, 0) + w - now end
  elseif alg == 't' then
    local per = tonumber(ARGV[j + 5])
    local tokens = bucket(key, n, per)
    rem = math.floor(math.max(tokens, 0) + EPS)
    reset = fill(n, per, tokens)
  else
    inflight = leases(key)
    rem = math.max(n - inflight, 0)
  end
  return {sec, usec, rem, reset, inflight}
end

-- Phase 1 judges every limit and writes nothing but expired state, so that
-- a request that one limit rejects consumes nothing from the others.
local out = {sec, usec, 1}
local admit = true
local ok, sa, sb = {}, {}, {}
-- idleRem[i] and idleReset[i] are what limit i reads if it admits the
-- request and another limit rejects it, so that it consumes nothing here
-- (limit.Decision.Unconsumed).
local idleRem, idleReset = {}, {}
for i = 1, #KEYS do
  local key, j = KEYS[i], BASE + (i - 1) * STRIDE
  local alg = ARGV[j + 1]
  local n, w, cost = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), tonumber(ARGV[j + 7])
  local allowed, rem, reset, retry, delay = false, 0, 0, 0, 0
  if alg == 'f' or alg == 'F' then
    local start, cur = window(key, alg == 'F', w, tonumber(ARGV[j + 8]))
    reset = start + w - now
    allowed = cur + cost <= n
    if allowed then
      rem = n - cur - cost
      idleRem[i], idleReset[i] = n - cur, reset
      if alg == 'F' and cur == 0 then idleReset[i] = 0 end
    else
      rem = math.max(n - cur, 0)
      retry = reset
      if cost > n then retry = w end
    end
    sa[i], sb[i] = start, cur
  elseif alg == 's' then
    local count = logged(key, w)
    allowed = count + cost <= n
    if allowed then
      rem = n - count - cost
      local oldest = now
      idleRem[i], idleReset[i] = n - count, 0
      if count > 0 then
        oldest = score(key, 0)
        idleReset[i] = oldest + w - now
      end
      reset = oldest + w - now
    else
      rem = math.max(n - count, 0)
      if count > 0 then reset = score(key, 0) + w - now end
      -- The request fits once count+cost-n admissions have left.
      local k = count + cost - n
      if k <= count then retry = score(key, k - 1) + w - now else retry = w end
    end
    sa[i] = count
  elseif alg == 't' then
    local per, queue = tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6])
    local tokens, ts = bucket(key, n, per)
    if tokens + EPS >= cost then
      allowed = true
    else
      local wait = math.ceil((cost - tokens) / per)
      if cost <= n and wait <= queue then
        allowed = true
        delay = wait
      else
        retry = wait
        if cost > n then retry = math.ceil(cost / per) end
      end
    end
    local left = tokens
    if allowed then
      left = tokens - cost
      idleRem[i], idleReset[i] = math.floor(math.max(tokens, 0) + EPS), fill(n, per, tokens)
    end
    rem = math.floor(math.max(left, 0) + EPS)
    reset = fill(n, per, left)
    sa[i], sb[i] = tokens, ts
  else
    local inflight = leases(key)
    allowed = inflight + 1 <= n
    if allowed then
      rem = n - inflight - 1
      idleRem[i], idleReset[i] = n - inflight, 0
    else
      retry = 1000000
    end
  end
  ok[i] = allowed
  if not allowed and ARGV[j + 2] ~= '1' then admit = false end
  local o = 3 + (i - 1) * 5
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed and 1 or 0, rem, reset, retry, delay
end

if not admit then
  out[3] = 0
  for i = 1, #KEYS do
    if ok[i] then
      local o = 3 + (i - 1) * 5
      out[o + 2], out[o + 3], out[o + 5] = idleRem[i], idleReset[i], 0
    end
  end
  return out
end

-- Phase 2 records the admission in every limit that admitted it, shadow
-- ones included. A key that appears twice in one request is read again,
-- so that its second limit counts on top of the first, as the memory store
-- does. Every key written gets an expiry on this path, the only one that
-- writes.
local seen = {}
for i = 1, #KEYS do
  if ok[i] then
    local key, j = KEYS[i], BASE + (i - 1) * STRIDE
    local again = seen[key]
    seen[key] = true
    local alg = ARGV[j + 1]
    local n, w, cost = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), tonumber(ARGV[j + 7])
    if alg == 'f' or alg == 'F' then
      local start, cur = sa[i], sb[i]
      if again then start, cur = window(key, alg == 'F', w, tonumber(ARGV[j + 8])) end
      redis.call('HSET', key, 's', start, 'c', cur + cost)
      -- A window that was already open has carried its end as the key's
      -- expiry since its first admission, and HSET keeps it; only a new
      -- window needs one. This saves a write on every hot key.
      if cur == 0 then redis.call('PEXPIRE', key, ms(start + w - now)) end
    elseif alg == 's' then
      local count = sa[i]
      if again then count = redis.call('ZCARD', key) end
      -- A clock that stepped back must not unsort the log: the new
      -- entries are never older than the newest one.
      local at = now
      if count > 0 then at = math.max(at, score(key, -1)) end
      local member = ARGV[3] .. ':' .. i
      if cost == 1 then
        redis.call('ZADD', key, at, member)
      else
        local batch = {}
        for c = 1, cost do
          batch[#batch + 1] = at
          batch[#batch + 1] = member .. ':' .. c
          if #batch == 1000 or c == cost then
            redis.call('ZADD', key, unpack(batch))
            batch = {}
          end
        end
      end
      redis.call('PEXPIRE', key, ms(at + w - now))
    elseif alg == 't' then
      local per = tonumber(ARGV[j + 5])
      local tokens, ts = sa[i], sb[i]
      if again then tokens, ts = bucket(key, n, per) end
      local left = tokens - cost
      redis.call('HSET', key, 't', string.format('%.17g', left), 'ts', ts)
      redis.call('PEXPIRE', key, ms(ts + math.max(fill(n, per, left), 1) - now))
    else
      redis.call('ZADD', key, now + w, ARGV[4])
      -- The key lives as long as its longest lease; a shorter lease taken
      -- now must not cut the others' life short.
      local want = ms(w)
      if redis.call('PTTL', key) < want then redis.call('PEXPIRE', key, want) end
    end
  end
end
return out
