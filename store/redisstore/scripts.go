package redisstore

import "github.com/redis/go-redis/v9"

// The scripts run with EVALSHA (redis.Script.Run falls back to EVAL once
// after a restart emptied Redis's script cache). Redis runs each script
// alone: nothing else reads or writes between its commands.
//
// Epochs are integers below 2^53, exact in Lua's doubles; they are written
// with %.0f, never tostring (which would switch to exponent form).

// luaCommon is shared by the scripts that read a thread's log.
const luaCommon = `
local function epochOf(id) return tonumber(string.match(id, '^(%d+)')) end
local function sid(e) return string.format('%.0f-0', e) end

-- cutOf returns the epoch of the newest message that retention drops from
-- the log: the oldest beyond keep, and any older than now - age (0: none).
local function cutOf(log, now, keep, age)
  local cut = 0
  local n = redis.call('XLEN', log)
  if n > keep then
    local r = redis.call('XRANGE', log, '-', '+', 'COUNT', n - keep)
    cut = epochOf(r[#r][1])
  end
  local oldest = now - age
  if oldest > 1 then
    local r = redis.call('XREVRANGE', log, sid(oldest - 1), '-', 'COUNT', 1)
    if #r > 0 then
      local e = epochOf(r[1][1])
      if e > cut then cut = e end
    end
  end
  return cut, n
end
`

// appendScript stores one message. KEYS: log, meta, index, ids, generation.
// ARGV: thread, now (ms), keep, age (ms), max threads, must exist
// ("1"/"0"), author as JSON, text as JSON, feed channel, the newest epoch
// the store has seen, a generation id, then id suffix candidates (6 hex
// each). It creates
// the generation (gen.go) if it is missing, so that a data set's start is
// never after its first message.
//
// It answers {"ok", epoch, id, json} or {"not_found"}, {"thread_limit"},
// {"collision"} (every candidate suffix is taken this second: try others).
//
// The feed message is "<thread> <previous newest epoch> <trimmed> <json>".
var appendScript = redis.NewScript(luaCommon + `
local log, meta, index, ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local thread = ARGV[1]
local now, keep, age = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('HSET', KEYS[5], 'id', ARGV[11], 'start', ARGV[2], 'lost', ARGV[10])
end

local prev = 0
local newest = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
if #newest == 0 then
  if ARGV[6] == '1' then return {'not_found'} end
  if not redis.call('ZSCORE', index, thread) and redis.call('ZCARD', index) >= tonumber(ARGV[5]) then
    return {'thread_limit'}
  end
else
  prev = epochOf(newest[1][1])
end
local epoch = now
if epoch <= prev then epoch = prev + 1 end

-- The UTC date and time of the epoch's second (days to civil date:
-- H. Hinnant's algorithm).
local secs = math.floor(epoch / 1000)
local days = math.floor(secs / 86400)
local sod = secs - days * 86400
local z = days + 719468
local era = math.floor(z / 146097)
local doe = z - era * 146097
local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
local mp = math.floor((5 * doy + 2) / 153)
local d = doy - math.floor((153 * mp + 2) / 5) + 1
local m = mp < 10 and mp + 3 or mp - 9
local y = yoe + era * 400
if m <= 2 then y = y + 1 end
local hh, mi, ss = math.floor(sod / 3600), math.floor((sod % 3600) / 60), sod % 60
local stamp = string.format('%04d%02d%02d-%02d%02d%02d', y, m, d, hh, mi, ss)
local ts = string.format('%04d-%02d-%02dT%02d:%02d:%02d+00:00', y, m, d, hh, mi, ss)

-- The id is unique in the thread: only messages of the same second can
-- share it. The first message of a second in the thread takes the first
-- candidate. Later ones check the hash of suffixes taken that second
-- (field "s" says which second), filled from the log the first time it is
-- needed: one scan per busy second, not one per message. The JSON starts
-- {"id":"MSG-YYYYMMDD-HHMMSS- so the suffix is bytes 28 to 33.
local suffix = ARGV[12]
if prev >= secs * 1000 then
  local sec = string.format('%.0f', secs)
  if redis.call('HGET', ids, 's') ~= sec then
    redis.call('DEL', ids)
    local fill = {'s', sec}
    for _, e in ipairs(redis.call('XRANGE', log, sid(secs * 1000), '+')) do
      fill[#fill + 1] = string.sub(e[2][2], 28, 33)
      fill[#fill + 1] = '1'
    end
    redis.call('HSET', ids, unpack(fill))
  end
  suffix = nil
  for i = 12, #ARGV do
    if redis.call('HEXISTS', ids, ARGV[i]) == 0 then suffix = ARGV[i] break end
  end
  if not suffix then return {'collision'} end
  redis.call('HSET', ids, suffix, '1')
  redis.call('PEXPIRE', ids, 10000)
end
local id = 'MSG-' .. stamp .. '-' .. suffix

local es = string.format('%.0f', epoch)
local json = '{"id":"' .. id .. '","epoch":' .. es .. ',"ts":"' .. ts .. '","author":' .. ARGV[7] .. ',"text":' .. ARGV[8] .. '}'
redis.call('XADD', log, es .. '-0', 'j', json)

local trimmed = tonumber(redis.call('HGET', meta, 'trimmed') or '0')
local cut = cutOf(log, now, keep, age)
if cut > 0 then
  redis.call('XTRIM', log, 'MINID', sid(cut + 1))
  if cut > trimmed then
    trimmed = cut
    redis.call('HSET', meta, 'trimmed', string.format('%.0f', cut))
  end
end
redis.call('ZADD', index, es, thread)
redis.call('PUBLISH', ARGV[9], thread .. ' ' .. string.format('%.0f', prev) .. ' ' .. string.format('%.0f', trimmed) .. ' ' .. json)
return {'ok', es, id, json}
`)

// sweepScript applies retention to one thread. KEYS: log, meta, index, ids.
// ARGV: thread, now (ms), keep, age (ms). It answers {dropped, removed}
// where removed is 1 if the thread was removed because nothing was left.
// A thread in the index without a log is taken out of the index.
var sweepScript = redis.NewScript(luaCommon + `
local log, meta, index = KEYS[1], KEYS[2], KEYS[3]
local thread = ARGV[1]
local cut, n = cutOf(log, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
if n == 0 then
  redis.call('DEL', log, meta, KEYS[4])
  redis.call('ZREM', index, thread)
  return {0, 0}
end
if cut == 0 then return {0, 0} end
local newest = epochOf(redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1][1])
if cut >= newest then
  redis.call('DEL', log, meta, KEYS[4])
  redis.call('ZREM', index, thread)
  return {n, 1}
end
redis.call('XTRIM', log, 'MINID', sid(cut + 1))
local trimmed = tonumber(redis.call('HGET', meta, 'trimmed') or '0')
if cut > trimmed then redis.call('HSET', meta, 'trimmed', string.format('%.0f', cut)) end
return {n - redis.call('XLEN', log), 0}
`)

// takeScript counts one post in two sliding windows, or says how long to
// wait. KEYS: thread window, IP window. ARGV: now (ms), window (ms), member,
// thread limit, IP limit. It answers 0 (counted) or the wait in ms.
var takeScript = redis.NewScript(`
local now, win = tonumber(ARGV[1]), tonumber(ARGV[2])
local function wait(key, limit)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now - win))
  local n = redis.call('ZCARD', key)
  if n < limit then return 0 end
  local r = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
  return tonumber(r[2]) + win - now
end
local w = math.max(wait(KEYS[1], tonumber(ARGV[4])), wait(KEYS[2], tonumber(ARGV[5])))
if w > 0 then return w end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], ARGV[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 0
`)

// acquireScript takes one stream lease on two keys if both are under their
// limits. KEYS: thread leases, IP leases. ARGV: member, lease (ms), thread
// limit, IP limit. Scores are expiry times on Redis's own clock, so nodes'
// clocks do not matter. It answers 1 (taken) or 0 (over a limit).
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
for i = 1, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', string.format('%.0f', now))
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[2 + i]) then return 0 end
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], string.format('%.0f', now + lease), ARGV[1])
  redis.call('PEXPIRE', KEYS[i], 3 * lease)
end
return 1
`)

// renewScript extends leases. KEYS: pairs of (thread leases, IP leases).
// ARGV: lease (ms), then one member per pair. A lease that expired while
// Redis was unreachable is added back: the stream is still open.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local exp = string.format('%.0f', now + lease)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], exp, ARGV[1 + math.floor((i + 1) / 2)])
  redis.call('PEXPIRE', KEYS[i], 3 * lease)
end
return #KEYS
`)
