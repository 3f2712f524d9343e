package redisstore

import "github.com/redis/go-redis/v9"

// The scripts run with EVALSHA (redis.Script.Run falls back to EVAL once
// after a restart emptied Redis's script cache). Redis runs each script
// alone: nothing else reads or writes between its commands.
//
// Epochs are integers below 2^53, exact in Lua's doubles; they are written
// with %.0f, never tostring (which would switch to exponent form).

// luaCommon is shared by the scripts of a thread. Every one of them is
// given the same keys (Store.keys): the thread's, then the global ones,
// which K names. A script builds K on every call; the library
// (functions.go) fills one K once per call instead (luaKeysFill).
const luaCommon = `
local K = {log = KEYS[1], meta = KEYS[2], ids = KEYS[3], v2 = KEYS[4], v2e = KEYS[5], revs = KEYS[6],
  cids = KEYS[7], ixs = KEYS[8], grants = KEYS[9], audit = KEYS[10], att = KEYS[11],
  index = KEYS[12], gen = KEYS[13], pending = KEYS[14], gindex = KEYS[15], events = KEYS[16]}
` + luaHelpers

// luaKeysFill sets K's fields from the keys of a call (functions.go).
const luaKeysFill = `
K.log, K.meta, K.ids, K.v2, K.v2e, K.revs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
K.cids, K.ixs, K.grants, K.audit, K.att = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
K.index, K.gen, K.pending, K.gindex, K.events = KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
`

// luaHelpers are luaCommon's functions.
const luaHelpers = `

local function epochOf(id) return tonumber(string.match(id, '^(%d+)')) end
local function fmt(n) return string.format('%.0f', n) end
local function sid(e) return fmt(e) .. '-0' end
local function num(x) return tonumber(x) or 0 end

-- publish sends msg on the feed channel ch: PUBLISH, or SPUBLISH (sharded
-- pub/sub, Redis 7: the channel is in the keys' slot) when ch starts with
-- a NUL byte (a Redis Cluster shard, sharded.go), on the rest of ch.
local function publish(ch, msg)
  if string.byte(ch, 1) == 0 then return redis.call('SPUBLISH', string.sub(ch, 2), msg) end
  return redis.call('PUBLISH', ch, msg)
end

-- Attachments (attach.go): K.att holds each upload's record by id, "u:"
-- .. id (the epoch of the message that names it), "b:" .. sha (how many
-- records hold those bytes) and ".bytes" (the bytes stored); the bytes
-- are the string K.att .. ":" .. sha, in the thread's slot.
-- releaseAtt drops an upload, and its bytes if no record holds them.
local function releaseAtt(id)
  local rec = redis.call('HGET', K.att, id)
  if not rec then return end
  redis.call('HDEL', K.att, id, 'u:' .. id)
  local ok, a = pcall(cjson.decode, rec)
  if not ok or type(a) ~= 'table' or type(a.sha256) ~= 'string' then return end
  if redis.call('HINCRBY', K.att, 'b:' .. a.sha256, -1) <= 0 then
    redis.call('HDEL', K.att, 'b:' .. a.sha256)
    redis.call('DEL', K.att .. ':' .. a.sha256)
    redis.call('HINCRBY', K.att, '.bytes', -(tonumber(a.size) or 0))
  end
end

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

-- dropV2 removes the v2 state of the messages retention drops (epoch <=
-- cut): their v2 objects and revs, and their client ids, interaction ids
-- and pending entries. It returns the newest rev among them (0 if none
-- has v2 state). Only a thread whose meta says "v2" has any.
local function dropV2(thread, cut)
  local es = redis.call('ZRANGEBYSCORE', K.v2e, '-inf', fmt(cut))
  if #es == 0 then return 0 end
  local newest = 0
  local revs = redis.call('ZMSCORE', K.revs, unpack(es))
  local js = redis.call('HMGET', K.v2, unpack(es))
  for i, e in ipairs(es) do
    local r = tonumber(revs[i]) or tonumber(e)
    if r > newest then newest = r end
    if js[i] then
      local ok, m = pcall(cjson.decode, js[i])
      if ok and type(m) == 'table' then
        if type(m.client_id) == 'string' and redis.call('HGET', K.cids, m.client_id) == e then
          redis.call('HDEL', K.cids, m.client_id)
        end
        local ix = m.interaction
        if type(ix) == 'table' and type(ix.id) == 'string' then
          redis.call('HDEL', K.ixs, ix.id)
          redis.call('ZREM', K.pending, thread .. ' ' .. ix.id)
        end
        if type(m.attachments) == 'table' then
          for _, a in ipairs(m.attachments) do
            if type(a) == 'table' and type(a.id) == 'string' then releaseAtt(a.id) end
          end
        end
      end
    end
  end
  redis.call('HDEL', K.v2, unpack(es))
  redis.call('ZREM', K.revs, unpack(es))
  redis.call('ZREMRANGEBYSCORE', K.v2e, '-inf', fmt(cut))
  return newest
end

-- trimAt drops the log's messages with epoch <= cut (> 0), with the marks
-- in meta (trimmed, trimmed_rev, and v2: whether the thread has v2 state).
-- It returns the marks as they are after it.
local function trimAt(thread, cut, trimmed, trimmedRev, v2)
  if v2 then
    local r = dropV2(thread, cut)
    if r > trimmedRev then
      trimmedRev = r
      redis.call('HSET', K.meta, 'trimmed_rev', fmt(r))
    end
  end
  redis.call('XTRIM', K.log, 'MINID', sid(cut + 1))
  if cut > trimmed then
    trimmed = cut
    redis.call('HSET', K.meta, 'trimmed', fmt(cut))
  end
  return trimmed, trimmedRev
end

-- announce publishes a change on the feed: "<thread> <the thread's rev
-- before it> <the newest epoch or rev retention dropped> <message JSON>".
local function announce(feed, thread, prevRev, trimmed, trimmedRev, json)
  local mark = math.max(trimmed, trimmedRev)
  publish(feed, thread .. ' ' .. fmt(prevRev) .. ' ' .. (mark == 0 and '0' or fmt(mark)) .. ' ' .. json)
end

-- removeThread deletes every key of the thread, its grants' entries in
-- the grant index and its interactions' in the pending index, and tells
-- the feed that its participants changed.
local function removeThread(thread, feed)
  for _, ix in ipairs(redis.call('HKEYS', K.ixs)) do
    redis.call('ZREM', K.pending, thread .. ' ' .. ix)
  end
  local gs = redis.call('HGETALL', K.grants)
  for i = 2, #gs, 2 do
    local d = string.match(gs[i], '"digest":"(%x+)"')
    if d and #d >= 16 and redis.call('HGET', K.gindex, string.sub(d, 1, 16)) == thread then
      redis.call('HDEL', K.gindex, string.sub(d, 1, 16))
    end
  end
  for _, f in ipairs(redis.call('HKEYS', K.att)) do
    if string.sub(f, 1, 2) == 'b:' then redis.call('DEL', K.att .. ':' .. string.sub(f, 3)) end
  end
  redis.call('DEL', K.log, K.meta, K.ids, K.v2, K.v2e, K.revs, K.cids, K.ixs, K.grants, K.audit, K.att)
  redis.call('ZREM', K.index, thread)
  if #gs > 0 then publish(feed, thread .. ' P') end
end

-- waiting counts the messages of author (as JSON) after hermes's newest,
-- up to limit.
local function waiting(author, limit)
  local n, from = 0, '+'
  while true do
    local r = redis.call('XREVRANGE', K.log, from, '-', 'COUNT', 32)
    if #r == 0 then return n end
    for _, e in ipairs(r) do
      local a = string.match(e[2][2], '^{"id":"[^"]*","epoch":%d+,"ts":"[^"]*","author":(".-"),"text":')
      if a == '"hermes"' then return n end
      if a == author then
        n = n + 1
        if n >= limit then return n end
      end
    end
    from = '(' .. r[#r][1]
  end
end
`

// appendScript stores one message. KEYS: Store.keys. ARGV:
//
//	1 thread          2 now (ms)        3 keep            4 age (ms)
//	5 max threads     6 must exist "1"  7 author as JSON  8 text as JSON
//	9 feed channel    10 the newest epoch the store has seen
//	11 a generation id (gen.go)
//	12 client id ("" if none)
//	13 the v2 tail: the v2 object after its rev ("" for a message with no
//	   v2 field, whose v2 object is its v1 object and rev)
//	14 interaction id ("" if none)    15 its deadline
//	16 participant grant id ("" if not a participant's post)
//	17 the grants record's version read   18 the grant with one more post
//	19 "1" if the grant's cap is spent    20 the most messages waiting
//	21 the thread's title to set ("" to leave it: open_thread sets it)
//	22 the id's stamp and ts of now's second ("YYYYMMDD-HHMMSS <ts>"):
//	   the script computes them only for an epoch in a later second
//	23 the webhook event to queue ("" if none: outbox.go)
//	24 the attachment ids the message names, space-separated ("" if none)
//	25 the v2 text as JSON ("" if it is the v1 text: only a message with
//	   attachments differs, whose v1 text has a line per attachment)
//	26 the post's entry in the rate windows ("" to count it in none),
//	   27 the window (ms), 28 the thread's limit, 29 the address's
//	30… id suffix candidates (6 hex each)
//
// With a rate entry (Store.AppendLimited), KEYS has two more, the
// thread's and the address's rate windows (RateLimiter's keys), and the
// post is counted in them as takeScript counts it, in the same step: a
// replay first (answered, counted in no window, even a full one), then
// the windows ({"rate", wait in ms}: nothing stored), then the append;
// an append refused takes its entries back, so that a refused post
// counts nowhere.
//
// An append that makes a thread creates the generation if it is missing, so
// that a data set's start is never after its first message (a thread that
// exists was made in this data set, which has its generation).
//
// It answers {"ok", epoch, id, v1 JSON, v2 JSON or ""}, {"replay", v2 JSON
// of the message with the client id}, {"not_found"}, {"thread_limit"},
// {"collision"} (every candidate suffix is taken this second: try
// others), {"retry"} (the grants record changed since it was read),
// {"cap"}, {"waiting", n}, {"attachment", id} (an attachment that is
// not an upload of the thread, or is on a message already) or
// {"unreadable", mark} (the thread is marked unreadable: unreadable.go;
// it answers so before anything else, a replay included, and a rated
// post counts in no window).
var appendScript = newLuaScript("append", luaCommon+luaRate, appendDefs, appendLua)

// appendDefs is appendScript's function appendRun, the append itself
// (appendLua counts the post in the rate windows around it). The library
// defines it once; a script, on every call.
const appendDefs = `
local function appendRun(thread, now, keep, age, participant, cid, rated)

-- What an append needs of the thread is in meta, read in one call: the
-- newest epoch ("last"), a lower bound of the oldest ("first"), the id
-- suffixes of the newest message's second ("sec", "sfx"). A thread written
-- before meta kept them (no "last") has them read from its log once.
local meta = redis.call('HMGET', K.meta, 'trimmed', 'rev', 'trimmed_rev', 'v2', 'last', 'first', 'sec', 'sfx', 'n', 'unreadable')
if meta[10] then return {'unreadable', meta[10]} end
local prev, first = tonumber(meta[5]), tonumber(meta[6])
local firstWas = first
-- "n" is an upper bound of the log's length: its length after the append
-- that wrote it (only appends add to the log; what drops messages leaves
-- it above). An append reads the length (XLEN) only when the bound says
-- the log may be over keep, or there is no bound.
local n = tonumber(meta[9])
local set -- meta's other fields to write, if any
if not prev then
  local newest = redis.call('XREVRANGE', K.log, '+', '-', 'COUNT', 1)
  if #newest == 0 then
    if ARGV[6] == '1' or participant ~= '' then return {'not_found'} end
    if not redis.call('ZSCORE', K.index, thread) and redis.call('ZCARD', K.index) >= tonumber(ARGV[5]) then
      return {'thread_limit'}
    end
    if redis.call('EXISTS', K.gen) == 0 then
      redis.call('HSET', K.gen, 'id', ARGV[11], 'start', ARGV[2], 'lost', ARGV[10])
    end
    prev = 0
    n = 0
  else
    prev = epochOf(newest[1][1])
    first = epochOf(redis.call('XRANGE', K.log, '-', '+', 'COUNT', 1)[1][1])
  end
end
local rev = math.max(prev, num(meta[2]))

if participant ~= '' and (redis.call('HGET', K.grants, '.v') or '') ~= ARGV[17] then
  return {'retry'}
end
if cid ~= '' and not rated then
  local e = redis.call('HGET', K.cids, cid)
  local js = e and redis.call('HGET', K.v2, e)
  if js then return {'replay', js} end
end
if participant ~= '' then
  if ARGV[19] == '1' then return {'cap'} end
  local n = waiting(ARGV[7], tonumber(ARGV[20]))
  if n >= tonumber(ARGV[20]) then return {'waiting', fmt(n)} end
end
local atts
if ARGV[24] ~= '' then
  atts = {}
  for id in string.gmatch(ARGV[24], '%S+') do
    if redis.call('HEXISTS', K.att, id) == 0 or redis.call('HEXISTS', K.att, 'u:' .. id) == 1 then
      return {'attachment', id}
    end
    atts[#atts + 1] = id
  end
end

local epoch = now
if epoch <= rev then epoch = rev + 1 end
if not first then first = epoch end

-- The UTC date and time of the epoch's second: the caller's (ARGV 22) if
-- the epoch is in now's second, as it nearly always is; else computed
-- (days to civil date: H. Hinnant's algorithm).
local secs = math.floor(epoch / 1000)
local stamp, ts = string.match(ARGV[22], '^(%d+-%d+) (%S+)$')
if secs ~= math.floor(now / 1000) or not stamp then
  local floor = math.floor
  local days = floor(secs / 86400)
  local sod = secs - days * 86400
  local z = days + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local d = doy - floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  local hh, mi, ss = floor(sod / 3600), floor((sod % 3600) / 60), sod % 60
  stamp = string.format('%04d%02d%02d-%02d%02d%02d', y, m, d, hh, mi, ss)
  ts = string.format('%04d-%02d-%02dT%02d:%02d:%02d+00:00', y, m, d, hh, mi, ss)
end

-- The id is unique in the thread: only messages of the same second can
-- share it. The first message of a second in the thread takes the first
-- candidate. Later ones skip the suffixes taken that second: meta's "sfx"
-- (" <suffix>" each) if "sec" is that second, else (written before meta
-- kept them) read from the log. The JSON starts {"id":"MSG-YYYYMMDD-HHMMSS-
-- so the suffix is bytes 28 to 33.
local suffix = ARGV[30]
local es = epoch == now and ARGV[2] or fmt(epoch)
local sec = epoch >= 1000 and string.sub(es, 1, -4) or fmt(secs)
local taken = ''
if prev >= secs * 1000 then
  if meta[7] == sec then
    taken = meta[8] or ''
  else
    local t = {}
    for _, e in ipairs(redis.call('XRANGE', K.log, sid(secs * 1000), '+')) do
      t[#t + 1] = ' ' .. string.sub(e[2][2], 28, 33)
    end
    taken = table.concat(t)
  end
  suffix = nil
  for i = 30, #ARGV do
    if not string.find(taken, ' ' .. ARGV[i], 1, true) then suffix = ARGV[i] break end
  end
  if not suffix then return {'collision'} end
end
local id = 'MSG-' .. stamp .. '-' .. suffix

local json = '{"id":"' .. id .. '","epoch":' .. es .. ',"ts":"' .. ts .. '","author":' .. ARGV[7] .. ',"text":' .. ARGV[8] .. '}'
-- The first write of an append to a thread that exists. It fails only if
-- the log holds an entry meta does not know of, at or after the epoch:
-- written by something else (by hand). One that decodes is taken as the
-- newest (the caller tries again, after it); one that does not marks
-- the thread unreadable (unreadable.go).
local added = redis.pcall('XADD', K.log, es .. '-0', 'j', json)
if type(added) == 'table' and added.err then
  local top = redis.call('XREVRANGE', K.log, '+', '-', 'COUNT', 1)[1]
  if not top then return redis.error_reply(added.err) end
  local ok, m = pcall(cjson.decode, top[2][2] or '')
  if ok and type(m) == 'table' and top[2][1] == 'j' then
    redis.call('HSET', K.meta, 'last', fmt(epochOf(top[1])), 'sec', '')
    return {'retry'}
  end
  redis.call('HSETNX', K.meta, 'unreadable', top[1])
  return {'unreadable', top[1]}
end

-- A message with v2 fields keeps its v2 object beside the log.
local v2 = meta[4]
local v2json = ''
if ARGV[13] ~= '' then
  if ARGV[25] ~= '' then
    v2json = '{"id":"' .. id .. '","epoch":' .. es .. ',"ts":"' .. ts .. '","author":' .. ARGV[7] .. ',"text":' .. ARGV[25] .. ',"rev":' .. es .. ARGV[13]
  else
    v2json = string.sub(json, 1, -2) .. ',"rev":' .. es .. ARGV[13]
  end
  if atts then
    for _, a in ipairs(atts) do redis.call('HSET', K.att, 'u:' .. a, es) end
  end
  redis.call('HSET', K.v2, es, v2json)
  redis.call('ZADD', K.v2e, es, es)
  if not v2 then
    v2 = '1'
    set = {'v2', '1'}
  end
  if cid ~= '' then redis.call('HSET', K.cids, cid, es) end
  if ARGV[14] ~= '' then
    redis.call('HSET', K.ixs, ARGV[14], es)
    redis.call('ZADD', K.pending, ARGV[15], thread .. ' ' .. ARGV[14])
  end
end
if participant ~= '' then
  redis.call('HSET', K.grants, participant, ARGV[18])
  redis.call('HINCRBY', K.grants, '.v', 1)
end

if ARGV[21] ~= '' then
  set = set or {}
  set[#set + 1] = 'title'
  set[#set + 1] = ARGV[21]
end

-- Retention: by count (the log's length) and by age (only once the oldest
-- message may be past it: "first" is a lower bound of its epoch).
local trimmed, trimmedRev = num(meta[1]), num(meta[3])
if n then n = n + 1 end
if not n or n > keep then n = redis.call('XLEN', K.log) end
if n > keep or first <= now - age then
  local cut = cutOf(K.log, now, keep, age)
  if cut > 0 then
    trimmed, trimmedRev = trimAt(thread, cut, trimmed, trimmedRev, v2)
    n = redis.call('XLEN', K.log)
    first = epochOf(redis.call('XRANGE', K.log, '-', '+', 'COUNT', 1)[1][1])
  elseif first <= now - age then
    first = epochOf(redis.call('XRANGE', K.log, '-', '+', 'COUNT', 1)[1][1])
  end
end
-- Meta's fields that changed: "sec" and "first" seldom do.
if meta[7] ~= sec then
  set = set or {}
  set[#set + 1] = 'sec'
  set[#set + 1] = sec
end
if first ~= firstWas then
  set = set or {}
  set[#set + 1] = 'first'
  set[#set + 1] = fmt(first)
end
if set then
  redis.call('HSET', K.meta, 'last', es, 'sfx', taken .. ' ' .. suffix, 'n', n, unpack(set))
else
  redis.call('HSET', K.meta, 'last', es, 'sfx', taken .. ' ' .. suffix, 'n', n)
end
redis.call('ZADD', K.index, es, thread)
announce(ARGV[9], thread, rev, trimmed, trimmedRev, v2json ~= '' and v2json or json)
if ARGV[23] ~= '' then
  redis.call('XADD', K.events, '*', 't', ARGV[23], 'th', thread, 'at', es, 'm', v2json ~= '' and v2json or json)
end
if participant ~= '' then publish(ARGV[9], thread .. ' P') end
return {'ok', es, id, json, v2json}
end
`

// appendLua is appendScript's own Lua: the post counted in the rate
// windows, if it is rated, around appendRun.
const appendLua = `
local thread = ARGV[1]
local now, keep, age = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local participant = ARGV[16]
local cid = ARGV[12]
if ARGV[26] == '' then return appendRun(thread, now, keep, age, participant, cid, false) end
if cid ~= '' then
  local bad = redis.call('HGET', K.meta, 'unreadable')
  if bad then return {'unreadable', bad} end
  local e = redis.call('HGET', K.cids, cid)
  local js = e and redis.call('HGET', K.v2, e)
  if js then return {'replay', js} end
end
local win, l1, l2 = tonumber(ARGV[27]), tonumber(ARGV[28]), tonumber(ARGV[29])
local wait, n1, n2 = rateTake(KEYS[17], KEYS[18], ARGV[26], now, win, l1, l2)
if wait > 0 then return {'rate', fmt(wait)} end
local res = appendRun(thread, now, keep, age, participant, cid, true)
if res[1] == 'ok' then
  rateKeep(KEYS[17], n1, l1, now, win, ARGV[27])
  rateKeep(KEYS[18], n2, l2, now, win, ARGV[27])
else
  redis.call('RPOP', KEYS[17])
  redis.call('RPOP', KEYS[18])
end
return res
`

// changeScript stores a message's new v2 object if the message is still
// retained and its rev is still the one read (compare and set: the caller
// computed the change from that state). KEYS: Store.keys. ARGV: thread,
// the message's epoch, the rev read, now (ms), the new v2 object up to its
// rev ("…,\"rev\":") and after it, the interaction id to take out of the
// pending index ("" if none), the feed channel, the webhook event to
// queue ("" if none: outbox.go). The change takes the
// thread's next epoch as the message's rev: max(now, the thread's rev + 1).
//
// It answers {"ok", rev}, {"retry"} (the message changed since it was
// read), {"gone"} (retention dropped it) or {"unreadable", mark} (the
// thread is marked unreadable: unreadable.go).
var changeScript = redis.NewScript(luaCommon + `
local thread, es = ARGV[1], ARGV[2]
if #redis.call('XRANGE', K.log, es .. '-0', es .. '-0') == 0 then return {'gone'} end
local cur = redis.call('ZSCORE', K.revs, es) or es
if tonumber(cur) ~= tonumber(ARGV[3]) then return {'retry'} end
local meta = redis.call('HMGET', K.meta, 'trimmed', 'rev', 'trimmed_rev', 'last', 'unreadable')
if meta[5] then return {'unreadable', meta[5]} end
local last = tonumber(meta[4]) or epochOf(redis.call('XREVRANGE', K.log, '+', '-', 'COUNT', 1)[1][1])
local prevRev = math.max(last, num(meta[2]))
local rev = tonumber(ARGV[4])
if rev <= prevRev then rev = prevRev + 1 end
local rs = fmt(rev)
local v2json = ARGV[5] .. rs .. ARGV[6]
redis.call('HSET', K.v2, es, v2json)
redis.call('ZADD', K.v2e, es, es)
redis.call('ZADD', K.revs, rs, es)
redis.call('HSET', K.meta, 'rev', rs, 'v2', '1')
if ARGV[7] ~= '' then redis.call('ZREM', K.pending, thread .. ' ' .. ARGV[7]) end
redis.call('ZADD', K.index, 'XX', rs, thread)
announce(ARGV[8], thread, prevRev, num(meta[1]), num(meta[3]), v2json)
if ARGV[9] ~= '' then
  redis.call('XADD', K.events, '*', 't', ARGV[9], 'th', thread, 'at', rs, 'm', v2json)
end
return {'ok', rs}
`)

// messageScript reads one message for a change: by interaction id (ARGV
// "ix", id) or by message id (ARGV "id", id, and the first and last epoch
// of the id's second). KEYS: Store.keys. It answers {epoch, v1 JSON, v2
// JSON or ""}, {} if the thread has no such message, or {"unreadable",
// mark} if the thread is marked unreadable (unreadable.go).
var messageScript = redis.NewScript(luaCommon + `
local bad = redis.call('HGET', K.meta, 'unreadable')
if bad then return {'unreadable', bad} end
local es, entry
if ARGV[1] == 'ix' then
  es = redis.call('HGET', K.ixs, ARGV[2])
  if not es then return {} end
  local r = redis.call('XRANGE', K.log, es .. '-0', es .. '-0')
  if #r == 0 then return {} end
  entry = r[1]
else
  local want = '{"id":"' .. ARGV[2] .. '"'
  for _, e in ipairs(redis.call('XRANGE', K.log, ARGV[3] .. '-0', ARGV[4] .. '-0')) do
    if string.sub(e[2][2], 1, #want) == want then
      entry = e
      break
    end
  end
  if not entry then return {} end
  es = string.match(entry[1], '^(%d+)')
end
return {es, entry[2][2], redis.call('HGET', K.v2, es) or ''}
`)

// changesScript reads the v2 view of a thread: the messages with rev >
// since in their current state (since <= 0: the newest limit, all if limit
// <= 0), with the thread's marks and the generation (created if missing,
// as genCmds does). KEYS: Store.keys. ARGV: since, limit, then a
// generation id, start and lost for a missing generation.
//
// It answers {gen id, gen start, gen lost, trimmed, rev, trimmed_rev, the
// newest message's v1 JSON or "", the thread's title or "", then for each
// message its v1 JSON and its v2 JSON or ""}; the caller orders them by
// rev. A thread marked unreadable (unreadable.go) answers {"unreadable",
// mark}.
var changesScript = redis.NewScript(luaCommon + `
redis.call('HSETNX', K.gen, 'id', ARGV[3])
redis.call('HSETNX', K.gen, 'start', ARGV[4])
redis.call('HSETNX', K.gen, 'lost', ARGV[5])
local g = redis.call('HMGET', K.gen, 'id', 'start', 'lost')
local meta = redis.call('HMGET', K.meta, 'trimmed', 'rev', 'trimmed_rev', 'v2', 'title', 'unreadable')
if meta[6] then return {'unreadable', meta[6]} end
local newest = redis.call('XREVRANGE', K.log, '+', '-', 'COUNT', 1)
local out = {g[1] or '', g[2] or '', g[3] or '', meta[1] or '0', meta[2] or '0', meta[3] or '0', '', meta[5] or ''}
if #newest == 0 then return out end
out[7] = newest[1][2][2]
local since, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local entries
if since <= 0 then
  if limit > 0 then
    local r = redis.call('XREVRANGE', K.log, '+', '-', 'COUNT', limit)
    entries = {}
    for i = #r, 1, -1 do entries[#entries + 1] = r[i] end
  else
    entries = redis.call('XRANGE', K.log, '-', '+')
  end
else
  entries = redis.call('XRANGE', K.log, sid(since + 1), '+')
  if meta[4] then
    -- Messages written before since and changed after it.
    for _, e in ipairs(redis.call('ZRANGEBYSCORE', K.revs, '(' .. fmt(since), '+inf')) do
      if tonumber(e) <= since then
        local r = redis.call('XRANGE', K.log, e .. '-0', e .. '-0')
        if #r > 0 then entries[#entries + 1] = r[1] end
      end
    end
  end
end
local js = {}
if meta[4] and #entries > 0 then
  local es = {}
  for i, e in ipairs(entries) do es[i] = string.match(e[1], '^(%d+)') end
  js = redis.call('HMGET', K.v2, unpack(es))
end
for i, e in ipairs(entries) do
  out[#out + 1] = e[2][2]
  out[#out + 1] = js[i] or ''
end
return out
`)

// sweepScript applies retention to one thread. KEYS: Store.keys. ARGV:
// thread, now (ms), keep, age (ms), feed channel. It answers {dropped,
// removed} where removed is 1 if the thread was removed because nothing
// was left; a removed thread takes its grants, audit and index entries
// with it. A thread in the index without a log is taken out of the index.
// A thread marked unreadable (unreadable.go) is kept as it is, for an
// operator to look at: {0, 0, 1}.
var sweepScript = redis.NewScript(luaCommon + `
local thread, now, keep, age = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n = redis.call('XLEN', K.log)
if n == 0 then
  removeThread(thread, ARGV[5])
  return {0, 0}
end
if redis.call('HEXISTS', K.meta, 'unreadable') == 1 then return {0, 0, 1} end
local cut = cutOf(K.log, now, keep, age)
if cut == 0 then return {0, 0} end
local newest = epochOf(redis.call('XREVRANGE', K.log, '+', '-', 'COUNT', 1)[1][1])
if cut >= newest then
  removeThread(thread, ARGV[5])
  return {n, 1}
end
local meta = redis.call('HMGET', K.meta, 'trimmed', 'trimmed_rev', 'v2')
trimAt(thread, cut, num(meta[1]), num(meta[2]), meta[3])
return {n - redis.call('XLEN', K.log), 0}
`)

// grantsScript writes a thread's participants record (the hash
// Store.grantsKey) if its version is still the one read (compare and set),
// and tells the feed. KEYS: Store.keys. ARGV: thread, the version read
// ("" if none), feed channel, "1" if the thread must have a message, the
// digest prefix to point at the thread in the grant index ("" if none),
// the grant id to add to the record's order ("" if none), the ids of
// grants to remove (space-separated, "" if none) and the digest prefixes
// of theirs to take out of the grant index (if it points at this thread),
// the webhook event to queue ("" if none: outbox.go), its time (ms) and
// its participant object, then field and value pairs to set. It answers
// "ok", "retry", "not_found", or "unreadable" for a thread that must have
// a message (an invite) and is marked unreadable (unreadable.go): a
// write that takes access away (a revoke) or notes a grant's use is
// stored there, as on the file store.
var grantsScript = redis.NewScript(luaCommon + `
local thread = ARGV[1]
if ARGV[4] == '1' and redis.call('XLEN', K.log) == 0 then return 'not_found' end
if ARGV[4] == '1' and redis.call('HEXISTS', K.meta, 'unreadable') == 1 then return 'unreadable' end
if (redis.call('HGET', K.grants, '.v') or '') ~= ARGV[2] then return 'retry' end
if ARGV[7] ~= '' then
  local drop = {}
  for id in string.gmatch(ARGV[7], '%S+') do
    drop[id] = true
    redis.call('HDEL', K.grants, id)
  end
  local kept = {}
  for id in string.gmatch(redis.call('HGET', K.grants, '.order') or '', '%S+') do
    if not drop[id] then kept[#kept + 1] = id end
  end
  redis.call('HSET', K.grants, '.order', table.concat(kept, ' '))
  for p in string.gmatch(ARGV[8], '%S+') do
    if redis.call('HGET', K.gindex, p) == thread then redis.call('HDEL', K.gindex, p) end
  end
end
for i = 12, #ARGV, 2 do
  redis.call('HSET', K.grants, ARGV[i], ARGV[i + 1])
end
if ARGV[9] ~= '' then
  redis.call('XADD', K.events, '*', 't', ARGV[9], 'th', thread, 'at', ARGV[10], 'p', ARGV[11])
end
if ARGV[6] ~= '' then
  local o = redis.call('HGET', K.grants, '.order')
  if o and o ~= '' then o = o .. ' ' .. ARGV[6] else o = ARGV[6] end
  redis.call('HSET', K.grants, '.order', o)
end
redis.call('HINCRBY', K.grants, '.v', 1)
if ARGV[5] ~= '' then redis.call('HSET', K.gindex, ARGV[5], thread) end
publish(ARGV[3], thread .. ' P')
return 'ok'
`)
