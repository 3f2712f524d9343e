package redisstore

import "github.com/redis/go-redis/v9"

// The limiters' scripts (scripts.go has the threads'): the rate windows
// and the stream leases that every node shares.

// luaRate is the rate windows' Lua, shared by takeScript and by
// appendScript, which counts a post in the windows itself when the
// transport hands it both (Store.AppendLimited).
//
// A window is a list of the entries of the posts it counted, oldest
// first: "<time> <id>", the time (ms) on the clock of the Redis that holds
// the window (TIME, in the script: rateNow), so that nodes whose clocks
// disagree count one window alike, and the id the post's (random: undo
// finds the entry by it, undoScript). The post is pushed on both; if
// either list then holds limit earlier posts and the limit-th newest of
// them is still inside the window, the post is taken back from both and
// the wait is when that one leaves. A full window keeps its newest limit
// entries (no older one can count again); any window drops its expired
// head every 64 posts. The common case is TIME, then RPUSH and PEXPIRE on
// each key.
// luaNow defines redisNow(): this Redis's clock (TIME), in ms. Leases
// and rate windows are on it, so that the nodes' clocks do not matter.
const luaNow = `
local function redisNow()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000) -- numbers: converted once, not twice as tonumber does
end
`

const luaRate = luaNow + `
-- rateNow is the windows' clock (ms) as text: arg if it is a number
-- (tests only: RateLimiter.clock), else this Redis's own: TIME's seconds
-- and the first three digits of its microseconds (zero-padded to six),
-- the digits of redisNow() made of TIME's text, with no conversion to a
-- number and back (a window's entry needs only the text; rateTake and
-- rateKeep convert it in the rare case they compare times).
local function rateNow(arg)
  if arg ~= '' and tonumber(arg) then return arg end
  local t = redis.call('TIME')
  local us = t[2]
  if #us < 6 then us = string.sub('00000' .. us, -6) end
  return t[1] .. string.sub(us, 1, 3)
end

-- rateTake pushes the entry of post id, at now (ms, as text), on windows
-- k1 and k2 (limits l1, l2; k2 nil: k1 alone) and answers 0 and the
-- lists' lengths, or the wait in ms (the entry taken back).
local function rateTake(k1, k2, id, nowText, win, l1, l2)
  local wait, now = 0, nil
  local entry = nowText .. ' ' .. id
  local n1 = redis.call('RPUSH', k1, entry)
  if n1 > l1 then
    now = nowText + 0
    local t = tonumber(string.match(redis.call('LINDEX', k1, n1 - l1 - 1), '^(%d+)'))
    if t > now - win then wait = t + win - now end
  end
  local n2 = 0
  if k2 then
    n2 = redis.call('RPUSH', k2, entry)
    if n2 > l2 then
      now = now or nowText + 0
      local t = tonumber(string.match(redis.call('LINDEX', k2, n2 - l2 - 1), '^(%d+)'))
      if t > now - win and t + win - now > wait then wait = t + win - now end
    end
  end
  if wait > 0 then
    redis.call('RPOP', k1)
    if k2 then redis.call('RPOP', k2) end
  end
  return wait, n1, n2
end

-- rateKeep trims window k (limit l) a post was counted in (n: its length
-- after rateTake) at now (ms, as text) and extends its expiry to the
-- window (win ms; winArg as given).
local function rateKeep(k, n, l, nowText, win, winArg)
  if n > l then
    redis.call('LTRIM', k, -l, -1)
  elseif n % 64 == 0 then
    local now = nowText + 0
    local drop = 0
    for _, e in ipairs(redis.call('LRANGE', k, 0, 63)) do
      if tonumber(string.match(e, '^(%d+)')) > now - win then break end
      drop = drop + 1
    end
    if drop > 0 then redis.call('LTRIM', k, drop, -1) end
  end
  redis.call('PEXPIRE', k, winArg)
end
`

// takeScript counts one post in two sliding windows (or one), or says
// how long to wait (luaRate). KEYS: thread window, IP window (or one
// window). ARGV: the windows' clock ("": this Redis's; tests only:
// RateLimiter.clock), window (ms), the post's id (random), thread limit,
// IP limit (or the one window's limit). It answers 0 (counted) or the
// wait in ms.
var takeScript = newLuaScript("take", luaRate, "", takeLua)

// takeLua is takeScript's own Lua.
const takeLua = `
local now, win = rateNow(ARGV[1]), tonumber(ARGV[2])
local l1, l2 = tonumber(ARGV[4]), tonumber(ARGV[5])
local wait, n1, n2 = rateTake(KEYS[1], KEYS[2], ARGV[3], now, win, l1, l2)
if wait > 0 then return wait end
rateKeep(KEYS[1], n1, l1, now, win, ARGV[2])
if KEYS[2] then rateKeep(KEYS[2], n2, l2, now, win, ARGV[2]) end
return 0
`

// undoScript takes a post's entry out of its windows. KEYS: the windows
// (on one Redis). ARGV: the post's id. It finds the entry by its id, the
// newest first (a post undone is nearly always among the newest), since
// its time is the Redis's, which the node does not learn (nor could it,
// for a post whose answer was lost). It answers how many it removed.
var undoScript = redis.NewScript(`
local tail = ' ' .. ARGV[1]
local removed = 0
for i = 1, #KEYS do
  local from, found = -1, false
  while not found do
    local es = redis.call('LRANGE', KEYS[i], from - 63, from)
    if #es == 0 then break end
    for j = #es, 1, -1 do
      if string.sub(es[j], -#tail) == tail then
        removed = removed + redis.call('LREM', KEYS[i], -1, es[j])
        found = true
        break
      end
    end
    from = from - 64
  end
end
return removed
`)

// heldScript answers 1 if the window KEYS[1] holds the entry of post
// ARGV[1] (its id), else 0, looking from the newest as undoScript does.
var heldScript = redis.NewScript(`
local tail = ' ' .. ARGV[1]
local from = -1
while true do
  local es = redis.call('LRANGE', KEYS[1], from - 63, from)
  if #es == 0 then return 0 end
  for j = #es, 1, -1 do
    if string.sub(es[j], -#tail) == tail then return 1 end
  end
  from = from - 64
end
`)

// acquireScript takes one stream lease on its keys if each is under its
// limit. KEYS: thread leases, IP leases, and for a participant's stream
// the thread's participants' leases. ARGV: member, lease (ms), then each
// key's limit. Scores are expiry times on Redis's own clock, so nodes'
// clocks do not matter. It answers 1 (taken) or 0 (over a limit).
var acquireScript = redis.NewScript(luaNow + `
local now = redisNow()
local lease = tonumber(ARGV[2])
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', string.format('%d', now))
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[2 + i]) then return 0 end
end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], string.format('%d', now + lease), ARGV[1])
  redis.call('PEXPIRE', KEYS[i], 3 * lease)
end
return 1
`)

// renewScript extends leases. KEYS: the sets of the leases. ARGV: lease
// (ms), then for each key how many of its members follow, and they. A
// set's members are renewed in one ZADD and the set's expiry once, so a
// renewal costs Redis two commands per set (a thread's, an address's)
// rather than per stream. A lease that expired while Redis was unreachable
// is added back: the stream is still open.
var renewScript = redis.NewScript(luaNow + `
local now = redisNow()
local lease = tonumber(ARGV[1])
local exp = string.format('%d', now + lease)
local a = 2
for i = 1, #KEYS do
  local c = tonumber(ARGV[a])
  local z = {}
  for j = a + 1, a + c do
    z[#z + 1] = exp
    z[#z + 1] = ARGV[j]
  end
  redis.call('ZADD', KEYS[i], unpack(z))
  redis.call('PEXPIRE', KEYS[i], 3 * lease)
  a = a + c + 1
end
return #KEYS
`)
