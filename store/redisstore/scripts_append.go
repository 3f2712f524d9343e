package redisstore

// appendScript stores one message. KEYS: Store.appendKeys (luaAppendK),
// and for a participant's post its thread's grants. ARGV:
//
//	1 thread          2 now (ms)
//	3 the node's settings, the same at every call: "<keep> <age (ms)>
//	   <the rate window (ms)> <the thread's limit> <the address's>
//	   <feed channel>" (the window and limits 0 for an append counted in
//	   no window): one string, which the library parses once
//	   (settingsOf), where each argument is work at every call
//	4 what only a creation reads, in one argument: "<max threads> <must
//	   exist: 1 or 0> <the newest epoch the store has seen> <a generation
//	   id (gen.go)>"
//	5 author as JSON  6 text as JSON
//	7, 8 the id's stamp and the ts of now's second ("YYYYMMDD-HHMMSS",
//	   "YYYY-MM-DDTHH:MM:SS+00:00"): the script computes them only for an
//	   epoch in a later second
//	9 id suffix candidates, 6 hex each, space-separated
//
// and then those a plain post leaves empty, sent only up to the last
// that is not (an argument not sent is ""): a call's arguments are
// strings Redis makes and Lua interns and tables one by one, about 1 000
// instructions each (docs/performance-log.md):
//
//	10 the post's id in the rate windows ("": counted in none)
//	11 client id
//	12 the webhook event to queue ("" if webhooks are off, "-" if
//	   none: outbox.go; on, an interaction retention drops pending
//	   queues its event: dropV2)
//	13 the v2 tail: the v2 object after its rev ("" for a message with no
//	   v2 field, whose v2 object is its v1 object and rev)
//	14 interaction id    15 its deadline
//	16 participant grant id (not a participant's post: "", and 17–20
//	   are not read)
//	17 the grants record's version read   18 the grant with one more post
//	19 "1" if the grant's cap is spent    20 the most messages waiting
//	21 the thread's title to set ("" to leave it: open_thread sets it)
//	22 the attachment ids the message names, space-separated, in the
//	   post's order (one "!" and an id the caller refuses: answered
//	   {"attachment", id} at its place, after any id before it that is
//	   not an unused upload)
//	23 the v2 text as JSON ("" if it is the v1 text: only a message with
//	   attachments differs, whose v1 text has a line per attachment)
//	24 the windows' clock ("": this Redis's; tests only)
//
// With a rate entry (Store.AppendLimited), KEYS has two more (15, 16), the
// thread's and the address's rate windows (RateLimiter's keys; or one,
// the thread's, when the address's is on another shard: the address's
// limit is then unused), and the
// post is counted in them as takeScript counts it, on this Redis's clock
// (not ARGV 2, the node's, which the message's epoch takes), in the same
// step: a
// replay first (answered, counted in no window, even a full one), then
// the windows ({"rate", wait in ms}: nothing stored), then the append;
// an append refused takes its entries back, so that a refused post
// counts nowhere.
//
// An append that makes a thread creates the generation if it is missing, so
// that a data set's start is never after its first message (a thread that
// exists was made in this data set, which has its generation).
//
// It answers the message's v1 JSON, a string, for a message stored with
// no v2 object (no client id, name, interaction, card or attachment: a
// string answer is no table for Lua to make nor for Redis to walk),
// {"ok", v1 JSON, v2 JSON} for one with (the JSON has the epoch and the
// id), {"replay", v2 JSON
// of the message with the client id}, {"not_found"}, {"thread_limit"},
// {"collision"} (every candidate suffix is taken this second: try
// others), {"retry"} (the grants record changed since it was read),
// {"cap"}, {"waiting", n}, {"attachment", id} (an attachment that is
// not an upload of the thread, or is on a message already) or
// {"unreadable", mark} (the thread is marked unreadable: unreadable.go;
// it answers so before anything else, a replay included, and a rated
// post counts in no window).
var appendScript = newLuaScript("append", luaAppendK+luaHelpers+luaRate, appendDefs, appendLua)

// appendDefs is appendScript's function appendRun, the append itself
// (appendLua counts the post in the rate windows around it), which
// answers appendScript's answer and, if the message was stored, true,
// and its helpers settingsOf and countText. The library defines them
// once; a script, on every call.
const appendDefs = `
-- settingsOf is ARGV 3, a node's settings, parsed. A node sends the same
-- text at every call, which Lua interns: the library parses it once and
-- finds it by the text at the next calls (a script, defined at each call,
-- parses it each time: inLibrary). It keeps the texts of a few nodes'
-- settings; more start it again.
local settingsParsed, settingsCount = inLibrary and {}, 0
local function settingsOf(text)
  local st = settingsParsed and settingsParsed[text]
  if st then return st end
  local keep, age, win, l1, l2, feed = string.match(text, '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
  st = {keep = keep + 0, age = age + 0, win = win + 0, winText = win, l1 = l1 + 0, l2 = l2 + 0, feed = feed}
  if settingsParsed then
    if settingsCount >= 16 then settingsParsed, settingsCount = {}, 0 end
    settingsParsed[text], settingsCount = st, settingsCount + 1
  end
  return st
end

-- countText is fmt(n) for meta's "n", written at every post: the library
-- keeps the texts of the lengths up to 4 096, and a lookup costs less
-- than string.format (a script formats each time: inLibrary).
local countTexts = inLibrary and {}
local function countText(n)
  if not countTexts then return fmt(n) end
  local t = countTexts[n]
  if t then return t end
  t = fmt(n)
  if n <= 4096 then countTexts[n] = t end
  return t
end

local function appendRun(thread, now, st, participant, cid, rated)
local keep, age, feed = st.keep, st.age, st.feed
local tail, event = ARGV[13] or '', ARGV[12] or ''

-- What an append needs of the thread is in meta, read in one call: the
-- newest epoch ("last"), a lower bound of the oldest ("first"), the id
-- suffixes of the newest message's second ("sec", "sfx"). A thread written
-- before meta kept them (no "last") has them read from its log once.
local meta = redis.call('HMGET', K.meta, 'trimmed', 'rev', 'trimmed_rev', 'v2', 'last', 'first', 'sec', 'sfx', 'n', 'unreadable')
if meta[10] then return {'unreadable', meta[10]} end
-- Meta's numbers are read with + 0 (one conversion; tonumber converts
-- twice): the scripts write them, as numbers.
local prev, first = meta[5], meta[6]
if prev then prev = prev + 0 end
if first then first = first + 0 end
local firstWas = first
-- "n" is an upper bound of the log's length: its length after the append
-- that wrote it (only appends add to the log; what drops messages leaves
-- it above). An append reads the length (XLEN) only when the bound says
-- the log may be over keep, or there is no bound.
local n = meta[9]
if n then n = n + 0 end
local set -- meta's other fields to write, if any
local created -- the thread takes its place in the index from places
local above = 0 -- a thread made again: the newest change it had (K.floor)
if not prev then
  local newest = redis.call('XREVRANGE', K.log, '+', '-', 'COUNT', 1)
  if #newest == 0 then
    -- ARGV 4: what only a creation reads, in one argument.
    local maxThreads, mustExist, seen, genID = string.match(ARGV[4], '^(%S+) (%S+) (%S+) (%S+)$')
    if mustExist == '1' or participant ~= '' then return {'not_found'} end
    -- A thread's place in the limit: in the index, or in places (its
    -- uploads took it, attach.go), which it leaves for the index.
    if redis.call('ZSCORE', K.places, thread) then
      created = true
    elseif not redis.call('ZSCORE', K.index, thread) and
        redis.call('ZCARD', K.index) + redis.call('ZCARD', K.places) >= tonumber(maxThreads) then
      return {'thread_limit'}
    end
    if redis.call('EXISTS', K.gen) == 0 then
      redis.call('HSET', K.gen, 'id', genID, 'start', ARGV[2], 'lost', seen)
    end
    -- Made again after the sweep removed it: its epochs start above
    -- the newest change it had (the floor the removal kept, sweepScript).
    above = num(redis.call('GET', K.floor))
    prev = 0
    n = 0
  else
    prev = epochOf(newest[1][1])
    first = epochOf(redis.call('XRANGE', K.log, '-', '+', 'COUNT', 1)[1][1])
  end
end
-- Compared in Lua rather than with math.max, as below math.floor: each C
-- function a post calls is work at every post.
local rev = num(meta[2])
if prev > rev then rev = prev end
if above > rev then rev = above end

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
  local n = waiting(ARGV[5], tonumber(ARGV[20]))
  if n >= tonumber(ARGV[20]) then return {'waiting', fmt(n)} end
end
local atts
if (ARGV[22] or '') ~= '' then
  atts = {}
  for id in string.gmatch(ARGV[22], '%S+') do
    if string.byte(id, 1) == 33 then return {'attachment', string.sub(id, 2)} end -- "!": refused by the caller's read
    if redis.call('HEXISTS', K.att, id) == 0 or redis.call('HEXISTS', K.att, 'u:' .. id) == 1 then
      return {'attachment', id}
    end
    atts[#atts + 1] = id
  end
end

local epoch = now
if epoch <= rev then epoch = rev + 1 end
if not first then first = epoch end

-- The UTC date and time of the epoch's second: the caller's (ARGV 7,
-- 8) if the epoch is in now's second, as it nearly always is; else
-- computed (days to civil date: H. Hinnant's algorithm).
local secs = (epoch - epoch % 1000) / 1000
local stamp, ts = ARGV[7], ARGV[8]
if (epoch ~= now and secs ~= (now - now % 1000) / 1000) or stamp == '' or ts == '' then
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
local cands = ARGV[9]
local suffix = string.sub(cands, 1, 6)
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
  for i = 1, #cands, 7 do
    local c = string.sub(cands, i, i + 5)
    if not string.find(taken, ' ' .. c, 1, true) then suffix = c break end
  end
  if not suffix then return {'collision'} end
end
local id = 'MSG-' .. stamp .. '-' .. suffix

local json = '{"id":"' .. id .. '","epoch":' .. es .. ',"ts":"' .. ts .. '","author":' .. ARGV[5] .. ',"text":' .. ARGV[6] .. '}'
-- The first write of an append to a thread that exists. It fails only if
-- the log holds an entry meta does not know of, at or after the epoch:
-- written by something else (by hand). One that decodes is taken as the
-- newest (the caller tries again, after it); one that does not marks
-- the thread unreadable (unreadable.go).
-- XADD answers the id it was given (a string, which Lua interns: the
-- same), or an error.
local esid = es .. '-0'
local added = redis.pcall('XADD', K.log, esid, 'j', json)
if added ~= esid then
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
if tail ~= '' then
  if (ARGV[23] or '') ~= '' then
    v2json = '{"id":"' .. id .. '","epoch":' .. es .. ',"ts":"' .. ts .. '","author":' .. ARGV[5] .. ',"text":' .. ARGV[23] .. ',"rev":' .. es .. tail
  else
    v2json = string.sub(json, 1, -2) .. ',"rev":' .. es .. tail
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
  if (ARGV[14] or '') ~= '' then
    redis.call('HSET', K.ixs, ARGV[14], es)
    redis.call('ZADD', K.pending, ARGV[15], thread .. ' ' .. ARGV[14])
  end
end
if participant ~= '' then
  redis.call('HSET', K.grants, participant, ARGV[18])
  redis.call('HINCRBY', K.grants, '.v', 1)
end

if (ARGV[21] or '') ~= '' then
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
    trimmed, trimmedRev = trimAt(thread, cut, trimmed, trimmedRev, v2, event ~= '', epoch, feed)
    n = redis.call('XLEN', K.log)
    first = epochOf(redis.call('XRANGE', K.log, '-', '+', 'COUNT', 1)[1][1])
  elseif first <= now - age then
    first = epochOf(redis.call('XRANGE', K.log, '-', '+', 'COUNT', 1)[1][1])
  end
end
-- Meta's fields that changed: "sec" at the thread's first post of a
-- second, written with no table when it is the only one; "first" seldom.
local secNew = meta[7] ~= sec
if first ~= firstWas then
  set = set or {}
  set[#set + 1] = 'first'
  set[#set + 1] = fmt(first)
end
local sfx = taken .. ' ' .. suffix
if set then
  if secNew then
    set[#set + 1] = 'sec'
    set[#set + 1] = sec
  end
  redis.call('HSET', K.meta, 'last', es, 'sfx', sfx, 'n', countText(n), unpack(set))
elseif secNew then
  redis.call('HSET', K.meta, 'last', es, 'sfx', sfx, 'n', countText(n), 'sec', sec)
else
  redis.call('HSET', K.meta, 'last', es, 'sfx', sfx, 'n', countText(n))
end
redis.call('ZADD', K.index, es, thread)
if created then redis.call('ZREM', K.places, thread) end
-- The rev's text is meta's "last" when the rev is the newest epoch, as
-- it is but after a change (v2.go) or a thread made again: no format.
announce(feed, thread, rev == prev and meta[5] or fmt(rev), trimmed, trimmedRev, v2json ~= '' and v2json or json)
if event ~= '' and event ~= '-' then
  redis.call('XADD', K.events, '*', 't', event, 'th', thread, 'at', es, 'm', v2json ~= '' and v2json or json)
end
if participant ~= '' then publish(feed, thread .. ' P') end
-- Stored: the message's JSON alone when it has no v2 object (a string
-- answer: no table for Lua to make nor for Redis to walk), else a table.
if v2json == '' then return json, true end
return {'ok', json, v2json}, true
end
`

// appendLua is appendScript's own Lua: the post counted in the rate
// windows, if it is rated, around appendRun.
const appendLua = `
local thread = ARGV[1]
-- Arguments that are numbers as the store sends them are read with + 0:
-- one conversion, where tonumber (a C call) converts twice.
local now = ARGV[2] + 0
local st = settingsOf(ARGV[3])
local participant = ARGV[16] or ''
if participant ~= '' then K.grants = KEYS[15] end
local cid = ARGV[11] or ''
local rid = ARGV[10] or ''
if rid == '' then return (appendRun(thread, now, st, participant, cid, false)) end
if cid ~= '' then
  local bad = redis.call('HGET', K.meta, 'unreadable')
  if bad then return {'unreadable', bad} end
  local e = redis.call('HGET', K.cids, cid)
  local js = e and redis.call('HGET', K.v2, e)
  if js then return {'replay', js} end
end
local win, l1, l2 = st.win, st.l1, st.l2
local rnow = rateNow(ARGV[24] or '')
local wait, n1, n2 = rateTake(KEYS[15], KEYS[16], rid, rnow, win, l1, l2)
if wait > 0 then return {'rate', fmt(wait)} end
local res, stored = appendRun(thread, now, st, participant, cid, true)
if stored then
  rateKeep(KEYS[15], n1, l1, rnow, win, st.winText)
  if KEYS[16] then rateKeep(KEYS[16], n2, l2, rnow, win, st.winText) end
else
  redis.call('RPOP', KEYS[15])
  if KEYS[16] then redis.call('RPOP', KEYS[16]) end
end
return res
`
