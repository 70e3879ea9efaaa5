-- decide.lua: the four algorithms of limit/internal/core/algorithm.go, on Redis state.
--
-- KEYS[i] is the state of limit i; the keys of a request are distinct
-- (the store merges limits on one key, core.Merge). ARGV (layout: the
-- comment on decideSource in decide.go):
--   1 mode: "d" decides every limit of a request whose limits are all
--     fixed windows, "D" of any other request, "p" peeks at the one
--     limit, "b" decides a batch of "d" requests, "r" gives back what a
--     "d" or "D" call took, "l" leases a slice of a fixed window (below)
--   2 clock offset, µs, added to TIME (0 outside tests)
--   3 token: makes sliding-window log members unique per decision
--   4 lease id of concurrency limits
--   then per limit: algorithm, shadow, n, window|lease ttl, cost, and
--   after them the zone offset and the bounds of three windows (algorithm
--   z, below) or tokens per µs and queue (t)
--
-- Redis runs one script at a time, so the CPU time of this one, which runs
-- for every request, bounds how many requests a Redis can decide. Fixed
-- windows, the limits most requests meet, take the shortest path: each is
-- one string, "start:count", all of them read by one MGET and each written
-- by one SET, and nothing is converted, made or grown that their answer
-- does not need.
--
-- Numbers are Lua doubles. Every time here is an integer number of µs below
-- 2^53, so it is exact; big numbers go to redis.call as numbers (Redis
-- prints them exactly) or into strings with %d, never through tostring
-- (%.14g).

local byte, find, sub, format = string.byte, string.find, string.sub, string.format
local ceil, floor, fmod, max, min = math.ceil, math.floor, math.fmod, math.max, math.min

-- TIME's reply and the numbers among this script's own arguments are
-- numbers for sure, so arithmetic converts them where the calls of every
-- request do, which costs Redis less than a call of tonumber; a stored
-- value may be anything, so tonumber, nil for what is not a number, reads
-- it.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local clock = now -- Redis's own, which it reads a PXAT against
if ARGV[2] ~= '0' then now = now + tonumber(ARGV[2]) end

-- pxat is the PXAT of a key for state that matters for us more µs: the
-- first whole millisecond of Redis's clock at or after then, and after now.
-- A PX counts from Redis's current millisecond, rounded down, so a window
-- could expire up to 1 ms before its end and lose its count; this cannot.
local function pxat(us)
  if us < 1 then us = 1 end
  return format('%d', ceil((clock + us) / 1000))
end

-- life is the PXAT of a fixed window's key whose window ends in reset µs.
-- Windows aligned to the clock end at the same instant for every key of a
-- limit — every user's, say — and if their keys expired together, Redis
-- would spend up to 25 ms of one expire cycle deleting them while every
-- decision waited (seen at 5,000 decisions/s with 100,000 users: 11 ms
-- stalls). So they live on for a part of min(w, 60 s) that varies with the
-- time of the SET, which spreads their expiry over that span. A key that
-- outlives its window is harmless: its start no longer matches.
local function life(alg, reset, w)
  if alg == 'F' then return pxat(reset) end
  return pxat(reset + fmod(now, min(w, 60000000)))
end

-- zone returns the start and length of the window of algorithm z that
-- holds t. ARGV from j + 6 are the bounds of three windows in a row that
-- the caller placed around its own time: on the days a zone's offset
-- changes they are not multiples of one window (a local day of 23 or 25
-- hours), so Redis's time, which may be on either side of a bound the
-- caller's is not, picks among them. Outside them, the windows are those
-- of the window w and offset off.
local function zone(t, j, w, off)
  local b0, b3 = tonumber(ARGV[j + 6]), tonumber(ARGV[j + 9])
  if t >= b0 and t < b3 then
    local b1, b2 = tonumber(ARGV[j + 7]), tonumber(ARGV[j + 8])
    if t < b1 then return b0, b1 - b0 end
    if t < b2 then return b1, b2 - b1 end
    return b2, b3 - b2
  end
  local x = t + off
  local m = fmod(x, w)
  if m < 0 then m = m + w end
  return x - m - off, w
end

-- fixed returns the current fixed window's start and count, whether the
-- stored window is the current one, and the window's length. v is the
-- key's value as MGET reads it: "start:count", or false. MGET reads a key
-- of another type as false where GET would fail, so a key left as a hash
-- by an older version of this script is no window, and the SET of the
-- next admission replaces it. j is where the limit's arguments start in
-- ARGV, for algorithm z's zone, unless the caller has its offset as a
-- number, off (a batch, whose windows around its time are all alike).
local function fixed(v, alg, w, j, off)
  local s, c
  if v then
    local p = find(v, ':', 1, true)
    if p then s, c = tonumber(sub(v, 1, p - 1)), tonumber(sub(v, p + 1)) end
  end
  if alg == 'F' then
    if s and c and s + w > now then return s, c, true, w end
    return now, 0, false, w
  end
  local start
  if alg == 'z' and not off then
    start, w = zone(now, j, w, tonumber(ARGV[j + 5]))
  else
    if alg ~= 'z' then off = 0 end
    -- fmod is exact where a floor of a quotient could round up.
    local x = now + off
    local m = fmod(x, w)
    if m < 0 then m = m + w end
    start = x - m - off
  end
  if c and s == start then return start, c, true, w end
  return start, 0, false, w
end

-- The helpers of the other algorithms are made only for the requests that
-- may need them (not mode d): every closure made costs every call.
local EPS = 1e-9 -- limit.tokenEpsilon
local px, fill, bucket, logged, leases, score
if ARGV[1] ~= 'd' and ARGV[1] ~= 'b' then
  -- px is the PX of a key for state that matters for us more µs: whole
  -- milliseconds, at least 1 (0 would be an error), formatted here
  -- because %d costs less than Redis printing a Lua number with %.17g.
  function px(us)
    local m = ceil(us / 1000)
    if m < 1 then m = 1 end
    return format('%d', m)
  end

  -- fill is how long a bucket holding tokens takes to be full, in µs.
  function fill(n, per, tokens)
    local missing = n - tokens
    if missing <= EPS then return 0 end
    return ceil(missing / per)
  end

  -- bucket returns the tokens at now and the time they are counted at.
  -- The stored state is live until the bucket would be full again; a
  -- clock that stepped back refills nothing and does not move the
  -- bucket's time back, or the next refill would count the same time
  -- twice.
  function bucket(key, n, per)
    local h = redis.call('HMGET', key, 't', 'ts')
    local tk, ts = tonumber(h[1]), tonumber(h[2])
    if tk and ts and ts + max(fill(n, per, tk), 1) > now then
      local el = now - ts
      if el < 0 then el = 0 end
      return min(n, tk + el * per), max(ts, now)
    end
    return n, now
  end

  -- Admissions at or before now - w have left the sliding window, and
  -- leases at or before now have expired: removing them is the only write
  -- a rejected request makes.
  function logged(key, w)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
    return redis.call('ZCARD', key)
  end

  function leases(key)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    return redis.call('ZCARD', key)
  end

  -- score of the entry at rank k (0 is the oldest, -1 the newest)
  function score(key, k)
    return tonumber(redis.call('ZRANGE', key, k, k, 'WITHSCORES')[2])
  end
end

local nk = #KEYS

-- Mode b decides a batch of requests of mode d, one after the other, as
-- that many calls of mode d at the same time would: every request sees the
-- admissions of the ones before it. KEYS are the distinct keys of the
-- batch. ARGV 3 is the number of requests and ARGV 4 the number of
-- distinct sets of limit arguments in the batch. ARGV 5 holds the sets, 30
-- bytes each: the algorithm's and the shadow flag's characters, then n,
-- window, cost and zone offset + 2^47 as 56-bit numbers, high byte first.
-- ARGV 6 holds the requests, as 16-bit numbers: per request the number of
-- its limits, and per limit the index of its key in KEYS and of its
-- argument set. Binary numbers cost Redis and Lua much less than an
-- argument each, interned and then parsed by tonumber. The reply is
-- the time, then three numbers per limit of every request, in order, as
-- mode d gives them.
--
-- Keys that many requests share (a global limit, a route's) are read once
-- and written once per batch, the arguments that many requests share are
-- sent and converted once, and the script is called once: a batch costs
-- Redis much less than its requests one by one.
if ARGV[1] == 'b' then
  -- room returns an empty table with room for 16 items in its array part.
  -- Lua 5.1 has no other way to size a table before it is filled, and a
  -- table filled from nothing is resized at 1, 2, 4 and 8 items, which
  -- costs a batch of a few requests several per cent of its instructions.
  -- (out is filled without holes, so #out stays its length.)
  local function room()
    return {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
  end
  local fv = redis.call('MGET', unpack(KEYS))
  -- Per argument set: the algorithm, n, window and cost. Whether it is
  -- shadow, which only a rejection asks, and its zone offset, which only
  -- a key the batch has not read yet on a zone's window needs, are read
  -- from SB when they are.
  local SB = ARGV[5]
  local function num(q)
    local a, b, c, d, e, f, g = byte(SB, q, q + 6)
    return (((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g
  end
  local function shadow(t) return byte(SB, 30 * t - 28) == 49 end -- '1'
  local A, N, W, K = room(), room(), room(), room()
  for t = 1, ARGV[4] + 0 do
    local q = 30 * t - 29
    A[t], N[t], W[t], K[t] = sub(SB, q, q), num(q + 2), num(q + 9), num(q + 16)
  end
  -- Per key index: the window's start and count as the batch has made
  -- them, and in L what the key holds: nil for no live window (the SET of
  -- the first admission opens one), 0 for the live window unchanged, 1
  -- for it with admissions to write, or the PXAT of the window this batch
  -- opened. The windows a batch opens for one argument index start at the
  -- same time, so they share their PXAT: X holds it, made for the start in
  -- XS.
  local S, C, L = room(), room(), room()
  local X, XS = room(), room()
  -- Per limit of the batch, in order: its key and argument indexes, which
  -- the second pass reads here rather than decoding them again.
  local KX, TX, x = room(), room(), 0
  local out = room()
  out[1] = now
  local R, p = ARGV[6], 1
  for _ = 1, ARGV[3] + 0 do
    local mh, ml = byte(R, p, p + 1)
    local m, b = mh * 256 + ml, #out
    p = p + 2
    local first, admit, o = x, true, b + 1
    for _ = 1, m do
      local kh, kl, th, tl = byte(R, p, p + 3)
      local k, t = kh * 256 + kl, th * 256 + tl
      p = p + 4
      x = x + 1
      KX[x], TX[x] = k, t
      local n, cost = N[t], K[t]
      if not S[k] then
        local alg, off, live = A[t], 0
        if alg == 'z' then off = num(30 * t - 6) - 140737488355328 end
        S[k], C[k], live = fixed(fv[k], alg, W[t], nil, off)
        if live then L[k] = 0 end
      end
      -- The same judgement as mode d's, inline there and here: a shared
      -- function measured 1-2 µs more Redis CPU per decision. A window
      -- aligned to the clock answers with one number, as the store works
      -- out its reset and retry from the time (decideSource in decide.go).
      local cur = C[k]
      if A[t] == 'F' then
        local w = W[t]
        local reset = S[k] + w - now
        if cur + cost <= n then
          out[o], out[o + 1], out[o + 2] = n - cur - cost, reset, 0
        else
          local retry = reset
          if cost > n then retry = w end
          out[o], out[o + 1], out[o + 2] = max(n - cur, 0), reset, -1 - retry
          if not shadow(t) then admit = false end
        end
        o = o + 3
      else
        if cur + cost <= n then
          out[o] = n - cur - cost
        else
          out[o] = -1 - max(n - cur, 0)
          if not shadow(t) then admit = false end
        end
        o = o + 1
      end
    end
    -- Record the admission, or give back what a rejected request's
    -- admitting limits reported as consumed, as mode d does.
    x, o = first, b + 1
    for _ = 1, m do
      x = x + 1
      local k, t = KX[x], TX[x]
      local alg, cost = A[t], K[t]
      local aligned = alg ~= 'F'
      local took
      if aligned then took = out[o] >= 0 else took = out[o + 2] >= 0 end
      if took then
        if admit then
          local l = L[k]
          if not l then
            local st = S[k]
            if XS[t] ~= st then
              local w = W[t]
              X[t], XS[t] = life(alg, st + w - now, w), st
            end
            L[k] = X[t]
          elseif l == 0 then
            L[k] = 1
          end
          C[k] = C[k] + cost
        else
          out[o] = out[o] + cost
          if not aligned and not L[k] then out[o + 1] = 0 end
        end
      end
      if aligned then o = o + 1 else o = o + 3 end
    end
  end
  -- A value is "start:count", and a batch's windows share few starts and
  -- few counts (the new ones hold the cost): each is formatted once, as a
  -- sprintf costs Redis more than the rest of a SET's value.
  local SF, CF = {}, {}
  for k = 1, nk do
    local l = L[k]
    if l and l ~= 0 then
      local st, c = S[k], C[k]
      local sf, cf = SF[st], CF[c]
      if not sf then
        sf = format('%d:', st)
        SF[st] = sf
      end
      if not cf then
        cf = format('%d', c)
        CF[c] = cf
      end
      if l == 1 then
        redis.call('SET', KEYS[k], sf .. cf, 'KEEPTTL')
      else
        redis.call('SET', KEYS[k], sf .. cf, 'PXAT', l)
      end
    end
  end
  return out
end

-- Mode r gives back what a call of mode d or D took for a request that a
-- limit in another Redis Cluster slot then rejected, so that a rejected
-- request consumes nothing (see slots.go). KEYS are that call's keys and,
-- last, a marker key in their slot; ARGV are that call's arguments, with
-- cost 0 for the limits that took nothing, and last the time that call
-- decided at. The marker makes the give-back happen once however often it
-- is sent. The reply is the time, then per limit what it reads now:
-- remaining and reset after, as "p" gives them.
if ARGV[1] == 'r' then
  local nl, at = #KEYS - 1, tonumber(ARGV[#ARGV])
  local give = redis.call('SET', KEYS[nl + 1], '1', 'NX', 'PX', 60000)
  local out = {now}
  local j = 5
  for i = 1, nl do
    local key, alg = KEYS[i], ARGV[j]
    local n, w, cost = tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
    if not give then cost = 0 end
    local rem, reset = 0, 0
    if alg == 'f' or alg == 'F' or alg == 'z' then
      local v = redis.call('MGET', key)[1]
      if cost > 0 and v then
        -- Only the window the call counted in, which held the time it
        -- decided at, gets its count back.
        local p = find(v, ':', 1, true)
        local s, c = tonumber(sub(v, 1, (p or 1) - 1)), tonumber(sub(v, (p or #v) + 1))
        local mine = false
        if s and c and alg == 'F' then
          mine = s <= at and at < s + w
        elseif s and c and alg == 'z' then
          mine = s == zone(at, j, w, tonumber(ARGV[j + 5]))
        elseif s and c then
          mine = s == at - fmod(at, w)
        end
        if mine then
          c = max(c - cost, 0)
          -- A window left with no admission is no window, as if the
          -- call had never opened it.
          if c == 0 then
            redis.call('DEL', key)
            v = false
          else
            v = format('%d:%d', s, c)
            redis.call('SET', key, v, 'KEEPTTL')
          end
        end
      end
      local start, cur, live, wl = fixed(v, alg, w, j)
      rem = max(n - cur, 0)
      if alg ~= 'F' or live then reset = start + wl - now end
    elseif alg == 's' then
      if cost > 0 then
        local member = ARGV[3] .. ':' .. i
        if cost == 1 then
          redis.call('ZREM', key, member)
        else
          for c = 1, cost do redis.call('ZREM', key, member .. ':' .. c) end
        end
      end
      local count = logged(key, w)
      rem = max(n - count, 0)
      if count > 0 then reset = score(key, 0) + w - now end
    elseif alg == 't' then
      local per = tonumber(ARGV[j + 5])
      local tokens, ts = bucket(key, n, per)
      if cost > 0 then
        tokens = min(n, tokens + cost)
        redis.call('HSET', key, 't', format('%.17g', tokens), 'ts', ts)
        redis.call('PEXPIRE', key, px(ts + max(fill(n, per, tokens), 1) - now))
      end
      rem = floor(max(tokens, 0) + EPS)
      reset = fill(n, per, tokens)
    else
      if cost > 0 then redis.call('ZREM', key, ARGV[4]) end
      rem = max(n - leases(key), 0)
    end
    out[2 * i], out[2 * i + 1] = rem, reset
    if alg == 'z' then j = j + 10 elseif alg == 't' then j = j + 7 else j = j + 5 end
  end
  return out
end

-- Mode l leases a slice of a fixed window (limit.Rule.Sliced): from the
-- one limit's current window it takes what the limit's cost asks for, or
-- what the window has left if that is less, as admissions that the
-- instance then makes itself. The reply is the time, what it took, the
-- window's reset and what the window has left after.
if ARGV[1] == 'l' then
  local key, alg = KEYS[1], ARGV[5]
  local n, w, want = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  local start, cur, live, wl = fixed(redis.call('MGET', key)[1], alg, w, 5)
  local take = min(want, max(n - cur, 0))
  if take > 0 then
    local v = format('%d:%d', start, cur + take)
    if live then
      redis.call('SET', key, v, 'KEEPTTL')
    else
      redis.call('SET', key, v, 'PXAT', life(alg, start + wl - now, wl))
    end
  end
  return {now, take, start + wl - now, max(n - cur - take, 0)}
end

if ARGV[1] == 'p' then
  local key, alg = KEYS[1], ARGV[5]
  local n, w = tonumber(ARGV[7]), tonumber(ARGV[8])
  local rem, reset, inflight = 0, 0, 0
  if alg == 'f' or alg == 'F' or alg == 'z' then
    local start, cur, live, wl = fixed(redis.call('MGET', key)[1], alg, w, 5)
    rem = max(n - cur, 0)
    if alg ~= 'F' or live then reset = start + wl - now end
  elseif alg == 's' then
    local count = logged(key, w)
    rem = max(n - count, 0)
    if count > 0 then reset = score(key, 0) + w - now end
  elseif alg == 't' then
    local per = tonumber(ARGV[10])
    local tokens = bucket(key, n, per)
    rem = floor(max(tokens, 0) + EPS)
    reset = fill(n, per, tokens)
  else
    inflight = leases(key)
    rem = max(n - inflight, 0)
  end
  return {now, rem, reset, inflight}
end

-- Phase 1 judges every limit and writes nothing but expired state, so that
-- a request that one limit rejects consumes nothing from the others.
--
-- The reply is the time, then three numbers per limit: remaining, reset
-- after, and the delay if the limit admits the request or -1 - retry after
-- if it rejects it. st holds two values per limit for phase 2 to write.
-- Both are made with room for four limits, as many as most requests have,
-- so that they do not grow while they are filled.
local out = {now, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
local st = {nil, nil, nil, nil, nil, nil, nil, nil}
-- idle holds what a limit of another algorithm reads if it admits the
-- request and another limit rejects it, so that it consumes nothing
-- (core.Idle.Unconsumed); fixed windows work it out from their reply.
local idle
local fv -- the values of every key, read by one MGET at the first fixed window
local admit = true
local j = 5
for i = 1, nk do
  local alg = ARGV[j]
  local n, w, cost = ARGV[j + 2] + 0, ARGV[j + 3] + 0, ARGV[j + 4]
  if cost == '1' then cost = 1 else cost = tonumber(cost) end
  local o = 3 * i - 1
  if alg == 'f' or alg == 'F' or alg == 'z' then
    if not fv then fv = redis.call('MGET', unpack(KEYS)) end
    local v, start, cur, live, wl = fv[i], 0, 0, false, w
    if alg == 'f' then
      -- fixed(), inline for the most common limit; now is positive.
      start = now - fmod(now, w)
      if v then
        local p = find(v, ':', 1, true)
        if p and tonumber(sub(v, 1, p - 1)) == start then
          local c = tonumber(sub(v, p + 1))
          if c then cur, live = c, true end
        end
      end
    else
      start, cur, live, wl = fixed(v, alg, w, j)
    end
    local reset = start + wl - now
    if cur + cost <= n then
      out[o], out[o + 1], out[o + 2] = n - cur - cost, reset, 0
      -- The value to write and its PXAT, or false for a window already
      -- stored: its key has carried the window's end as its expiry since
      -- the SET that opened the window, and KEEPTTL keeps it.
      st[2 * i - 1], st[2 * i] = format('%d:%d', start, cur + cost), not live and life(alg, reset, w)
    else
      local retry = reset
      if cost > n then retry = w end
      out[o], out[o + 1], out[o + 2] = max(n - cur, 0), reset, -1 - retry
      if ARGV[j + 1] ~= '1' then admit = false end
    end
  else
    idle = idle or {}
    local key = KEYS[i]
    local allowed, rem, reset, retry, delay = false, 0, 0, 0, 0
    if alg == 's' then
      local count = logged(key, w)
      allowed = count + cost <= n
      if allowed then
        rem = n - count - cost
        local oldest = now
        idle[2 * i - 1], idle[2 * i] = n - count, 0
        if count > 0 then
          oldest = score(key, 0)
          idle[2 * i] = oldest + w - now
        end
        reset = oldest + w - now
      else
        rem = max(n - count, 0)
        if count > 0 then reset = score(key, 0) + w - now end
        -- The request fits once count+cost-n admissions have left.
        local k = count + cost - n
        if k <= count then retry = score(key, k - 1) + w - now else retry = w end
      end
      st[2 * i - 1] = count
    elseif alg == 't' then
      local per, queue = tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6])
      local tokens, ts = bucket(key, n, per)
      if tokens + EPS >= cost then
        allowed = true
      else
        local wait = ceil((cost - tokens) / per)
        if cost <= n and wait <= queue then
          allowed = true
          delay = wait
        else
          retry = wait
          if cost > n then retry = ceil(cost / per) end
        end
      end
      local left = tokens
      if allowed then
        left = tokens - cost
        idle[2 * i - 1], idle[2 * i] = floor(max(tokens, 0) + EPS), fill(n, per, tokens)
      end
      rem = floor(max(left, 0) + EPS)
      reset = fill(n, per, left)
      st[2 * i - 1], st[2 * i] = tokens, ts
    else
      local inflight = leases(key)
      allowed = inflight + 1 <= n
      if allowed then
        rem = n - inflight - 1
        idle[2 * i - 1], idle[2 * i] = n - inflight, 0
      else
        retry = 1000000
      end
    end
    if allowed then
      out[o], out[o + 1], out[o + 2] = rem, reset, delay
    else
      out[o], out[o + 1], out[o + 2] = rem, reset, -1 - retry
      if ARGV[j + 1] ~= '1' then admit = false end
    end
  end
  if alg == 'z' then j = j + 10 elseif alg == 't' then j = j + 7 else j = j + 5 end
end

if not admit then
  j = 5
  for i = 1, nk do
    local o, alg = 3 * i - 1, ARGV[j]
    if out[o + 2] >= 0 then
      if alg == 'f' or alg == 'F' or alg == 'z' then
        -- Without this request, cost more remains; and a first-aligned
        -- window that only this admission would have opened (it has a PX
        -- to set) is not open.
        out[o] = out[o] + tonumber(ARGV[j + 4])
        if alg == 'F' and st[2 * i] then out[o + 1] = 0 end
      else
        out[o], out[o + 1] = idle[2 * i - 1], idle[2 * i]
      end
      out[o + 2] = 0
    end
    if alg == 'z' then j = j + 10 elseif alg == 't' then j = j + 7 else j = j + 5 end
  end
  return out
end

-- Phase 2 records the admission in every limit that admitted it, shadow
-- ones included, from the state phase 1 read: a request's keys are
-- distinct, as the store merges the limits that share a counter, one key,
-- into one of their summed cost (core.Merge). Every key written gets an
-- expiry on this path, the only one that writes.
j = 5
for i = 1, nk do
  local alg = ARGV[j]
  if out[3 * i + 1] >= 0 then
    local key = KEYS[i]
    if alg == 'f' or alg == 'F' or alg == 'z' then
      local v, ttl = st[2 * i - 1], st[2 * i]
      if ttl then
        redis.call('SET', key, v, 'PXAT', ttl)
      else
        redis.call('SET', key, v, 'KEEPTTL')
      end
    else
      local n, w, cost = tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
      if alg == 's' then
        local count = st[2 * i - 1]
        -- A clock that stepped back must not unsort the log: the new
        -- entries are never older than the newest one.
        local at = now
        if count > 0 then at = max(at, score(key, -1)) end
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
        redis.call('PEXPIRE', key, px(at + w - now))
      elseif alg == 't' then
        local per = tonumber(ARGV[j + 5])
        local tokens, ts = st[2 * i - 1], st[2 * i]
        local left = tokens - cost
        redis.call('HSET', key, 't', format('%.17g', left), 'ts', ts)
        redis.call('PEXPIRE', key, px(ts + max(fill(n, per, left), 1) - now))
      else
        redis.call('ZADD', key, now + w, ARGV[4])
        -- The key lives as long as its longest lease; a shorter lease
        -- taken now must not cut the others' life short.
        local want = max(ceil(w / 1000), 1)
        if redis.call('PTTL', key) < want then redis.call('PEXPIRE', key, want) end
      end
    end
  end
  if alg == 'z' then j = j + 10 elseif alg == 't' then j = j + 7 else j = j + 5 end
end
return out
