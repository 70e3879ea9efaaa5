-- stream_read.lua: reads up to COUNT entries of a stream for a Source,
-- with the "event" field of each one longer than MAX replaced by its
-- length, so that such an entry never reaches the client.
--
-- KEYS[1] is the stream. ARGV:
--   1 max bytes of an event (0: any)
--   2 count
--   3 "group": XREADGROUP; ARGV 4 group, 5 consumer, 6 id (">" or the
--     last pending entry read)
--     "range": XRANGE; ARGV 4 start, 5 end
--
-- Each entry comes back as {id, event}: event is the field's value, or
-- its length (an integer) when it is longer than MAX, or missing when the
-- entry has no event field (a pending entry that MAXLEN trimmed comes back
-- without fields).
--
-- One entry is read per call, so that the script holds one long entry at a
-- time, not COUNT of them.

local stream = KEYS[1]
local max = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local mode = ARGV[3]

local function next_entry(cursor)
  if mode == 'group' then
    local r = redis.call('XREADGROUP', 'GROUP', ARGV[4], ARGV[5], 'COUNT', 1, 'STREAMS', stream, cursor)
    if not r or not r[1] then
      return nil
    end
    return r[1][2][1]
  end
  return redis.call('XRANGE', stream, cursor, ARGV[5], 'COUNT', 1)[1]
end

local out = {}
local cursor = ARGV[6]
if mode == 'range' then
  cursor = ARGV[4]
end
for _ = 1, count do
  local entry = next_entry(cursor)
  if not entry then
    break
  end
  local id, fields = entry[1], entry[2]
  -- New entries (">") move the group's cursor by themselves; pending
  -- entries and a range go on after the last one read.
  if mode == 'range' then
    cursor = '(' .. id
  elseif cursor ~= '>' then
    cursor = id
  end
  local item = {id}
  if type(fields) == 'table' then
    for i = 1, #fields, 2 do
      if fields[i] == 'event' then
        local v = fields[i + 1]
        if max > 0 and #v > max then
          item[2] = #v
        else
          item[2] = v
        end
        break
      end
    end
  end
  out[#out + 1] = item
end
return out
