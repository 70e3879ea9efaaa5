-- breaker.lua: the window, state and trials of a circuit breaker that a
-- fleet of gateways shares. KEYS[1] is the window, a hash: 'h' the newest
-- second (of Redis TIME), 'c' 'f' 's' the window's calls, failures and
-- slow calls, and 'c:SEC' 'f:SEC' 's:SEC' each second's. KEYS[2] is the
-- state, a hash: 'state' (0 closed, 1 open, 2 half-open, as the breaker
-- package numbers them), 'ep' the episode (it grows at every opening and
-- closing), 'opened' (ms), and in half-open 'admitted', 'done', 'fails',
-- 'slow' of the trials and 'last' (ms) the last trial's admission.
--
-- ARGV: 1 op (tick, trial, done, reset), 2 window (s), 3 min calls,
-- 4 failure rate, 5 slow call rate, 6 open for (ms), 7 half-open calls,
-- 8 trial timeout (ms), 9 the caller's episode; tick: 10-12 calls,
-- failures, slow calls to add; done: 10 failed, 11 slow, 12 cancelled;
-- 13 the store's clock offset (ms), which only tests set.
--
-- Returns {admitted (trial: 1 or 0), state, ep, opened, now (ms), calls,
-- failures, slow}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[13])
local sec = math.floor(now / 1000)
local op = ARGV[1]
local n = tonumber(ARGV[2])
local minCalls = tonumber(ARGV[3])
local failureRate = tonumber(ARGV[4])
local slowRate = tonumber(ARGV[5])
local openFor = tonumber(ARGV[6])
local halfCalls = tonumber(ARGV[7])
local trialTimeout = tonumber(ARGV[8])
local callerEp = tonumber(ARGV[9])
-- The state outlives the longest episode a live fleet could be in
-- without writing it; every call that finds it refreshes it.
local stateTTL = 2 * (n * 1000 + openFor + trialTimeout) + 60000

local v = redis.call('HMGET', KEYS[2], 'state', 'ep', 'opened', 'admitted', 'done', 'fails', 'slow', 'last')
local exists = v[1] ~= false
local state = tonumber(v[1] or '0')
local ep = tonumber(v[2] or '0')
local opened = tonumber(v[3] or '0')
local admitted = tonumber(v[4] or '0')
local done = tonumber(v[5] or '0')
local fails = tonumber(v[6] or '0')
local slow = tonumber(v[7] or '0')
local last = tonumber(v[8] or '0')
local dirty = false

local function open()
  state, ep, opened = 1, ep + 1, now
  admitted, done, fails, slow, last = 0, 0, 0, 0, 0
  redis.call('DEL', KEYS[1])
  dirty = true
end

local function close()
  state, ep = 0, ep + 1
  admitted, done, fails, slow, last = 0, 0, 0, 0, 0
  redis.call('DEL', KEYS[1])
  dirty = true
end

-- judge decides the trials once every outcome is in, by their own rates,
-- as the breaker package does.
local function judge()
  if done < halfCalls then
    return
  end
  if fails / halfCalls < failureRate and slow / halfCalls < slowRate then
    close()
  else
    open()
  end
end

-- expire fails the trials not reported within the trial timeout: a
-- gateway that took one and died must not hold the fleet half-open.
-- It looks only once the newest trial's timeout has passed, so that
-- every trial then unreported is late.
local function expire()
  if state == 2 and admitted > done and now > last + trialTimeout then
    fails = fails + admitted - done
    done = admitted
    dirty = true
    judge()
  end
end

-- advance moves the window's newest second to sec, dropping the seconds
-- that fell out of it, and returns the window's counts.
local function advance()
  local w = redis.call('HMGET', KEYS[1], 'h', 'c', 'f', 's')
  if w[1] == false then
    return 0, 0, 0
  end
  local head = tonumber(w[1])
  local c, f, s = tonumber(w[2]), tonumber(w[3]), tonumber(w[4])
  if sec - head >= n then
    redis.call('DEL', KEYS[1])
    return 0, 0, 0
  end
  if sec > head then
    for x = head + 1, sec do
      local old = x - n
      local b = redis.call('HMGET', KEYS[1], 'c:' .. old, 'f:' .. old, 's:' .. old)
      if b[1] ~= false then
        c = c - tonumber(b[1])
        f = f - tonumber(b[2] or '0')
        s = s - tonumber(b[3] or '0')
        redis.call('HDEL', KEYS[1], 'c:' .. old, 'f:' .. old, 's:' .. old)
      end
    end
    redis.call('HSET', KEYS[1], 'h', sec, 'c', c, 'f', f, 's', s)
  end
  return c, f, s
end

local ok = 0
local calls, failures, slows = 0, 0, 0
expire()
if op == 'tick' then
  if state == 0 then
    calls, failures, slows = advance()
    local dc, df, ds = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
    if dc > 0 and callerEp == ep then
      -- Counts of another episode are dropped: they were counted before
      -- the fleet last opened or closed.
      if redis.call('EXISTS', KEYS[1]) == 0 then
        redis.call('HSET', KEYS[1], 'h', sec, 'c', 0, 'f', 0, 's', 0)
      end
      calls, failures, slows = calls + dc, failures + df, slows + ds
      redis.call('HSET', KEYS[1], 'c', calls, 'f', failures, 's', slows)
      redis.call('HINCRBY', KEYS[1], 'c:' .. sec, dc)
      if df > 0 then redis.call('HINCRBY', KEYS[1], 'f:' .. sec, df) end
      if ds > 0 then redis.call('HINCRBY', KEYS[1], 's:' .. sec, ds) end
      redis.call('PEXPIRE', KEYS[1], n * 1000 + 1000)
      if calls >= minCalls and (failures / calls >= failureRate or slows / calls >= slowRate) then
        open()
        calls, failures, slows = 0, 0, 0
      end
    end
  end
elseif op == 'trial' then
  if state == 1 and now >= opened + openFor then
    state, admitted, done, fails, slow = 2, 0, 0, 0, 0
    dirty = true
  end
  if state == 2 and admitted < halfCalls then
    admitted, last, ok, dirty = admitted + 1, now, 1, true
  end
elseif op == 'done' then
  if state == 2 and callerEp == ep then
    if ARGV[12] == '1' then
      if admitted > done then
        admitted = admitted - 1
      end
    elseif done < admitted then
      done = done + 1
      if ARGV[10] == '1' then fails = fails + 1 end
      if ARGV[11] == '1' then slow = slow + 1 end
      judge()
    end
    dirty = true
  end
elseif op == 'reset' then
  close()
end

if dirty then
  redis.call('HSET', KEYS[2], 'state', state, 'ep', ep, 'opened', opened, 'admitted', admitted,
    'done', done, 'fails', fails, 'slow', slow, 'last', last)
end
if dirty or exists then
  redis.call('PEXPIRE', KEYS[2], stateTTL)
end
return {ok, state, ep, opened, now, calls, failures, slows}
