package redisstore

import "github.com/redis/go-redis/v9"

// The scripts run with EVALSHA (redis.Script.Run falls back to EVAL once
// after a restart emptied Redis's script cache). Redis runs each script
// alone: nothing else reads or writes between its commands.
//
// Epochs are integers below 2^53, exact in Lua's doubles; they are written
// with string.format's %d (fmt), never tostring (which would switch to
// exponent form). Redis's Lua 5.1 formats %d as a C long, exact for them,
// and about five times cheaper than %.0f, whose printf of a double was 3.4 %
// of redis-server's instructions for a post (docs/performance-log.md).

// luaCommon is shared by the scripts of a thread. Every one of them is
// given the same keys (Store.keys): the thread's, then the global ones,
// which K names. A script builds K on every call; the library
// (functions.go) fills one K once per call instead (luaKeysFill).
// inLibrary is false in a script, true in the library: the helpers keep
// what they found across calls only in the library, where a call's next
// finds it (a script defines them again at every call).
const luaCommon = `
local inLibrary = false
local K = {log = KEYS[1], meta = KEYS[2], ids = KEYS[3], v2 = KEYS[4], v2e = KEYS[5], revs = KEYS[6],
  cids = KEYS[7], ixs = KEYS[8], grants = KEYS[9], audit = KEYS[10], att = KEYS[11], floor = KEYS[12],
  index = KEYS[13], gen = KEYS[14], pending = KEYS[15], gindex = KEYS[16], events = KEYS[17], places = KEYS[18]}
` + luaHelpers

// luaKeysFill sets K's fields from the keys of a call (functions.go).
const luaKeysFill = `
K.log, K.meta, K.ids, K.v2, K.v2e, K.revs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
K.cids, K.ixs, K.grants, K.audit, K.att, K.floor = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
K.index, K.gen, K.pending, K.gindex, K.events, K.places = KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18]
`

// luaAppendK is appendScript's K: the keys a post may touch
// (Store.appendKeys), not the thread's ids, audit and the grant index,
// which no append touches, nor its grants, which only a participant's
// post touches (appendLua sets K.grants to its KEYS[15]). Each key given
// is work for Redis (a string in the call, in KEYS and in K).
const luaAppendK = `
local inLibrary = false
local K = {log = KEYS[1], meta = KEYS[2], v2 = KEYS[3], v2e = KEYS[4], revs = KEYS[5], cids = KEYS[6],
  ixs = KEYS[7], att = KEYS[8], floor = KEYS[9], index = KEYS[10], gen = KEYS[11], pending = KEYS[12],
  events = KEYS[13], places = KEYS[14]}
`

// luaAppendKeysFill sets K's fields from the keys of an append
// (luaAppendK), and those an append is not given to nil: K is the
// library's, and another function's call filled them.
const luaAppendKeysFill = `
K.log, K.meta, K.v2, K.v2e, K.revs, K.cids, K.ixs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
K.att, K.floor, K.index, K.gen, K.pending, K.events, K.places = KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
K.ids, K.grants, K.audit, K.gindex = nil, nil, nil, nil
`

// luaHelpers are luaCommon's functions.
const luaHelpers = `

local function epochOf(id) return tonumber(string.match(id, '^(%d+)')) end
local function fmt(n) return string.format('%d', n) end
local function sid(e) return fmt(e) .. '-0' end
local function num(x) if not x then return 0 end return tonumber(x) or 0 end

-- publish sends msg on the feed channel ch: PUBLISH, or SPUBLISH (sharded
-- pub/sub, Redis 7: the channel is in the keys' slot) when ch starts with
-- a NUL byte (a Redis Cluster shard, sharded.go), on the rest of ch. The
-- library keeps which it is per text (false: PUBLISH; a few texts), as a
-- node's feed is the same at every call: no C function per post.
local shardedOf, shardedCount = inLibrary and {}, 0
local function publish(ch, msg)
  local sch
  if shardedOf then sch = shardedOf[ch] end
  if sch == nil then
    sch = string.byte(ch, 1) == 0 and string.sub(ch, 2)
    if shardedOf then
      if shardedCount >= 16 then shardedOf, shardedCount = {}, 0 end
      shardedOf[ch], shardedCount = sch, shardedCount + 1
    end
  end
  if sch then return redis.call('SPUBLISH', sch, msg) end
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
-- and pending entries. An interaction dropped pending is closed expired
-- at epoch ms at: announced on the feed (channel feed) as
-- "<thread> X <message JSON>" (store.Batch.Closed), and with hooks
-- (webhooks on) its interaction.closed is queued. It returns the newest
-- rev among them (0 if none has v2 state). Only a thread whose meta says
-- "v2" has any.
local function dropV2(thread, cut, hooks, at, feed)
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
          if ix.state == 'pending' then
            -- The message closed expired at at (store.DroppedInteraction),
            -- which a node of an older version sends as it is. A string's
            -- quotes are escaped: the first bare "state" is the
            -- interaction's, the first bare "rev" the message's.
            local x = string.gsub(js[i], '"state":"pending"', '"state":"expired","answered_at":' .. fmt(at), 1)
            x = string.gsub(x, '"rev":%d+', '"rev":' .. fmt(math.max(at, r, num(m.rev))), 1)
            if hooks then
              redis.call('XADD', K.events, '*', 't', 'interaction.closed', 'th', thread, 'at', fmt(at), 'm', x)
            end
            if feed then publish(feed, thread .. ' X ' .. x) end
          end
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
-- in meta (trimmed, trimmed_rev, and v2: whether the thread has v2 state),
-- at epoch ms at (the events of hooks: dropV2). It returns the marks as
-- they are after it.
local function trimAt(thread, cut, trimmed, trimmedRev, v2, hooks, at, feed)
  if v2 then
    local r = dropV2(thread, cut, hooks, at, feed)
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
-- prevRev is the rev's text (fmt), which an append has at hand as meta
-- holds it.
local function announce(feed, thread, prevRev, trimmed, trimmedRev, json)
  local mark = trimmed
  if trimmedRev > mark then mark = trimmedRev end
  publish(feed, thread .. ' ' .. prevRev .. ' ' .. (mark == 0 and '0' or fmt(mark)) .. ' ' .. json)
end

-- removeThread deletes every key of the thread, its grants' entries in
-- the grant index and its interactions' in the pending index, and tells
-- the feed that its participants changed (grants or none: a wait on one
-- of its interactions looks in the store again, and finds it gone).
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
  redis.call('ZREM', K.places, thread)
  publish(feed, thread .. ' P') -- its grants are gone, and what followed the thread looks again
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
announce(ARGV[8], thread, fmt(prevRev), num(meta[1]), num(meta[3]), v2json)
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

// The scripts of the reads (changesScript, readScript, indexScript) only
// read, so that a full Redis (maxmemory with noeviction), which refuses
// every write and every MULTI, still runs them: a person can read their
// conversation while posts answer 503. They read the generation but do
// not create it (the caller does, when it is missing: withGen). They are
// not declared "#!lua flags=no-writes", which Redis 7 would also run when
// full, because Redis 6.2 (still supported) does not know the shebang and
// refuses the script; undeclared, a script runs when Redis is full until
// it calls a write command (TestReadsWhenRedisIsFull).

// changesScript reads the v2 view of a thread: the messages with rev >
// since in their current state (since <= 0: the newest limit, all if limit
// <= 0), with the thread's marks and the generation ("" if it is
// missing). KEYS: Store.keys. ARGV: since, limit.
//
// It answers {gen id, gen start, gen lost, trimmed, rev, trimmed_rev, the
// newest message's v1 JSON or "", the thread's title or "", then for each
// message its v1 JSON and its v2 JSON or ""}; the caller orders them by
// rev. A thread marked unreadable (unreadable.go) answers {"unreadable",
// mark}.
var changesScript = redis.NewScript(luaCommon + `
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

// readScript reads a v1 page of a thread (Store.read) when Redis is full
// and refuses the MULTI that reads it otherwise (readTx, which answers the
// same): its marks, the generation ("" if it is missing), its newest
// message and the messages from an id on (the newest limit of them if
// limit > 0). KEYS: log, meta, generation. ARGV: the first id, limit.
//
// It answers {gen id, gen start, gen lost, trimmed, "1" if the thread has
// v2 state or "", title, the newest entry's id or "", its field j, then
// the page's entries oldest first, each its id and its field j}. A
// thread marked unreadable (unreadable.go) answers {"unreadable", mark}.
var readScript = redis.NewScript(`
local function j(e)
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'j' then return f[i + 1] end
  end
  return ''
end
local m = redis.call('HMGET', KEYS[2], 'trimmed', 'v2', 'title', 'unreadable')
if m[4] then return {'unreadable', m[4]} end
local g = redis.call('HMGET', KEYS[3], 'id', 'start', 'lost')
local out = {g[1] or '', g[2] or '', g[3] or '', m[1] or '0', m[2] and '1' or '', m[3] or '', '', ''}
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return out end
out[7], out[8] = last[1][1], j(last[1])
local n = #out
local limit = tonumber(ARGV[2])
if limit > 0 then
  local r = redis.call('XREVRANGE', KEYS[1], '+', ARGV[1], 'COUNT', limit)
  for i = #r, 1, -1 do
    out[n + 1], out[n + 2] = r[i][1], j(r[i])
    n = n + 2
  end
else
  for _, e in ipairs(redis.call('XRANGE', KEYS[1], ARGV[1], '+')) do
    out[n + 1], out[n + 2] = e[1], j(e)
    n = n + 2
  end
end
return out
`)

// indexScript reads the thread index with each thread's rev, and the
// generation ("" if it is missing) (Store.threadIndex). KEYS: the index,
// the generation. It answers {gen id, gen start, gen lost, then each
// thread and its rev}.
var indexScript = redis.NewScript(`
local g = redis.call('HMGET', KEYS[2], 'id', 'start', 'lost')
local out = {g[1] or '', g[2] or '', g[3] or ''}
local n = 3
for _, x in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')) do
  n = n + 1
  out[n] = x
end
return out
`)

// sweepScript applies retention to one thread. KEYS: Store.keys. ARGV:
// thread, now (ms), keep, age (ms), feed channel, how long past its
// newest change a removed thread's floor lasts (ms), "1" if webhooks are on (an
// interaction dropped pending queues its event: dropV2; a removal, the
// participant.revoked of its links still active). It answers {dropped,
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
  -- Every message expired: the thread goes, and its newest change is
  -- kept (K.floor) until ARGV[6] ms past it (Retention.RemoveAfter: a
  -- reaction a moment ago, or one a node whose clock is ahead wrote),
  -- so that the thread made again starts above it (appendScript), above
  -- every cursor clients hold, whatever its next writer's clock.
  local m = redis.call('HMGET', K.meta, 'rev', 'trimmed', 'trimmed_rev')
  local floor = math.max(newest, num(m[1]), num(m[2]), num(m[3]))
  -- Its interactions still pending close expired: announced (and
  -- queued, with hooks).
  if redis.call('HGET', K.meta, 'v2') then dropV2(thread, newest, ARGV[7] == '1', now, ARGV[5]) end
  if ARGV[7] == '1' then
    -- Its links still active end now: participant.revoked, with the
    -- participant object revoked then (store.RemovedGrant), never the
    -- stored grant, which holds its token's digest: a node of an older
    -- version (a rolling deploy, a rollback) sends 'p' as it is.
    local function str(x) if type(x) == 'string' then return x end return '' end
    local gs = redis.call('HGETALL', K.grants)
    for i = 1, #gs, 2 do
      if string.sub(gs[i], 1, 1) ~= '.' then
        local ok, g = pcall(cjson.decode, gs[i + 1])
        if ok and type(g) == 'table' and g.role ~= 'owner' and (tonumber(g.revoked_at) or 0) == 0 and not g.expiry_noted then
          local p = '{"id":' .. cjson.encode(str(g.id)) .. ',"name":' .. cjson.encode(str(g.name)) ..
            ',"kind":' .. cjson.encode(str(g.kind)) .. ',"role":' .. cjson.encode(str(g.role)) ..
            ',"created_at":' .. fmt(num(g.created_at)) .. ',"expires_at":' .. fmt(num(g.expires_at)) ..
            ',"state":"revoked","cap":' .. fmt(num(g.cap)) .. ',"sent":' .. fmt(num(g.sent)) .. '}'
          redis.call('XADD', K.events, '*', 't', 'participant.revoked', 'th', thread, 'at', fmt(now), 'p', p)
        end
      end
    end
  end
  removeThread(thread, ARGV[5])
  local life = floor + tonumber(ARGV[6]) - now
  if life >= 0 then redis.call('SET', K.floor, fmt(floor), 'PX', fmt(life + 1)) end
  return {n, 1}
end
local meta = redis.call('HMGET', K.meta, 'trimmed', 'trimmed_rev', 'v2')
trimAt(thread, cut, num(meta[1]), num(meta[2]), meta[3], ARGV[7] == '1', now, ARGV[5])
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
