package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Attachments (contract Part 5) live in Redis, so every node serves them,
// bounded by the limits (LimitAttachmentBytes a file, LimitThreadAttachments
// the named files and the uploader's own drafts, LimitAttachmentPending the
// owner's uploads no message names yet, LimitParticipantPending a
// participant's). In
// the thread's slot:
//
//	<prefix>{T}:att          hash: <id> -> the upload's record (JSON),
//	                         u:<id> -> the epoch of the message naming it,
//	                         b:<sha256> -> records holding those bytes,
//	                         .bytes -> the bytes the thread stores
//	<prefix>{T}:att:<sha256> hash: the bytes, once per thread, in chunks:
//	                         "<i>" -> bytes [i*chunkSize, (i+1)*chunkSize)
//	                         (an empty file: the empty string)
//	<prefix>{T}:att:up:<r>   hash: an upload being received (expires)
//	<prefix>att-threads      sorted set: threads with uploads, by the newest
//	                         upload's time (the sweep collects them)
//	<prefix>att-places       sorted set: threads that hold uploads and no
//	                         message, by the time the first took its place
//	                         in the thread limit
//
// A thread's place in the thread limit (MaxThreads) is its entry in the
// index, or in att-places: the upload that starts a thread (one neither
// holds) takes a place in commitScript, refused (thread_limit, nothing
// kept) when the index and att-places together hold the most threads; the
// thread's first message moves it to the index (appendScript), and the
// collector takes it out once its uploads are gone (collectScript). So a
// client holding many tokens cannot keep uploads in more message-less
// threads than the limit leaves. att-places is in the index's slot (a
// cluster shard's keys all are), so the scripts read both at once.
//
// An upload is written to its staging key a chunk at a time, each chunk
// a field of its own (never whole in memory; the key expires if the writer
// dies): no command grows a string of megabytes, which Redis would copy
// whole every few APPENDs while every other client waits (see
// docs/performance-log.md). Then commitScript renames
// it to its digest's key, or drops it if the thread holds those bytes,
// and adds the record: an upload is whole or absent. appendScript marks
// the uploads a message names (u:<id>), refusing one unknown or marked;
// retention releases them with their message (dropV2, removeThread), and
// collectScript the uploads no message named within the hour, and those
// of a grant that has ended (run by the sweep, and at once by a revoke or
// an expiry noted: dropDrafts).

var _ store.Attachments = (*Store)(nil)

// chunkSize is the bytes of one chunk of a stored file: one HSET of an
// upload, one HGET of a download.
const chunkSize = 256 << 10

// stagingTTL bounds the life of an upload's staging key: a writer killed
// mid-upload leaves it for at most this long.
const stagingTTL = 2 * time.Hour

func (s *Store) attKey(thread string) string       { return s.prefix + "{" + thread + "}:att" }
func (s *Store) attThreadsKey() string             { return s.prefix + "att-threads" }
func (s *Store) blobKey(thread, sha string) string { return s.attKey(thread) + ":" + sha }

// PutAttachment implements store.Attachments.
func (s *Store) PutAttachment(ctx context.Context, thread string, up store.Upload) (chatrelay.Attachment, error) {
	return s.putAttachment(ctx, thread, up, nil)
}

// putAttachment is PutAttachment on s, shard of sh if sh is not nil: the
// thread limit then holds for all shards together, as an append's does
// (Sharded.appendRated): the upload is committed with no room for a new
// thread, and only one that would start its thread takes the creation
// lock, counts the other shards' threads and is committed again with the
// room they leave.
func (s *Store) putAttachment(ctx context.Context, thread string, up store.Upload, sh *Sharded) (_ chatrelay.Attachment, err error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return chatrelay.Attachment{}, err
	}
	if err := up.Check(); err != nil {
		return chatrelay.Attachment{}, err
	}
	if err := s.roomForThread(ctx, thread, sh); err != nil {
		return chatrelay.Attachment{}, err
	}
	if err := s.roomForUpload(ctx, thread, up.By); err != nil { // before the bytes are taken in; commitScript checks again
		return chatrelay.Attachment{}, err
	}
	stage := s.attKey(thread) + ":up:" + randomHex(8)
	defer func() {
		if err != nil {
			dctx, cancel := s.bound(context.WithoutCancel(ctx))
			s.rdb.Del(dctx, stage) // best effort: else it expires
			cancel()
		}
	}()
	aw := &appender{ctx: ctx, s: s, key: stage}
	rec, err := store.Receive(aw, up)
	if err == nil {
		err = aw.flush()
	}
	aw.release()
	if err != nil {
		var ce *chatrelay.Error
		if errors.As(err, &ce) {
			return chatrelay.Attachment{}, err
		}
		return chatrelay.Attachment{}, s.unavailable("upload", err)
	}
	a := store.NewAttachment(up, rec)
	js, _ := json.Marshal(store.StoredAttachment{Attachment: a, At: s.now().UnixMilli(), By: up.By, Grant: up.Grant})
	cctx, cancel := s.bound(ctx)
	defer cancel()
	// Listed for the sweep first (att-threads is in no thread's slot: the
	// script cannot list it): a crash after the commit leaves no upload
	// unlisted. Listed again after the commit, in case a refused upload of
	// the thread unlisted it meanwhile.
	list := func() error {
		return s.rdb.ZAdd(cctx, s.attThreadsKey(), redis.Z{Score: float64(s.now().UnixMilli()), Member: thread}).Err()
	}
	if err := list(); err != nil {
		return chatrelay.Attachment{}, s.unavailable("upload", err)
	}
	version := "" // the version of the grants record up.Grant was checked in
	commit := func(ctx context.Context, limit int) (string, error) {
		return commitScript.Run(ctx, s.rdb, []string{s.attKey(thread), stage, s.blobKey(thread, a.SHA256), s.metaKey(thread), s.index, s.places, s.grantsKey(thread)},
			a.ID, string(js), a.SHA256, a.Size, chatrelay.LimitThreadAttachments.Max, aw.n > 0,
			s.pendingSince(), chatrelay.LimitAttachmentPending.Max, aw.i, thread, limit, s.now().UnixMilli(),
			version, up.Grant != "", up.By, chatrelay.LimitParticipantPending.Max, chatrelay.LimitParticipantDraftBytes.Max).Text()
	}
	var res string
	for {
		if up.Grant != "" { // still the thread's, and active (a revoke, or the thread's removal, while the bytes arrived)
			rec, gerr := s.readGrants(cctx, thread)
			if gerr == nil {
				gerr = store.UploadGrant(rec.grants, up.Grant, s.now())
			}
			if gerr != nil {
				s.unlist(ctx, thread)
				return chatrelay.Attachment{}, gerr
			}
			version = rec.version
		}
		if sh == nil {
			res, err = commit(cctx, s.opt.MaxThreads)
		} else if res, err = commit(cctx, 0); err == nil && res == "thread_limit" {
			res, err = sh.commitNew(ctx, s, thread, commit)
		}
		if err != nil || res != "retry" { // retry: the grants record changed since it was read
			break
		}
	}
	if err != nil {
		s.unlist(ctx, thread)
		return chatrelay.Attachment{}, s.unavailable("upload", err)
	}
	if res == "thread_limit" {
		s.unlist(ctx, thread)
		return chatrelay.Attachment{}, chatrelay.Errorf(chatrelay.ThreadLimit, "thread limit reached")
	}
	if err := roomRefusal(res); err != nil {
		return chatrelay.Attachment{}, err // (the thread holds uploads: it stays listed)
	}
	if res == "lost" {
		// Redis lost chunks it had taken (it restarted without its data,
		// or failed over to a replica that lacked them): refused, so that
		// no record names bytes the store does not hold.
		s.unlist(ctx, thread)
		s.log.Warn("upload: Redis lost chunks of it", "thread", thread)
		return chatrelay.Attachment{}, unreachable(fmt.Errorf("redis upload: the staging key lacks chunks it was sent (%d)", aw.i))
	}
	if res == "unreadable" {
		s.unlist(ctx, thread)
		return chatrelay.Attachment{}, markedUnreadable(thread, "found by a read")
	}
	if err := list(); err != nil {
		s.log.Warn("upload: list the thread for the sweep", "thread", thread, "err", err) // listed before the commit
	}
	return a, nil
}

// unlist takes a thread that holds no upload off att-threads, after a
// refused upload listed it (best effort: the sweep drops a listing an hour
// old anyway).
func (s *Store) unlist(ctx context.Context, thread string) {
	ctx, cancel := s.bound(context.WithoutCancel(ctx))
	defer cancel()
	if n, err := s.rdb.Exists(ctx, s.attKey(thread)).Result(); err == nil && n == 0 {
		s.rdb.ZRem(ctx, s.attThreadsKey(), thread)
	}
}

// roomForUpload refuses (TooManyPending, TooManyDrafts: roomLua) an
// upload of by into a thread that holds the most uploads no message names
// yet that by may hold, before its bytes are taken in (commitScript
// checks again, atomically).
func (s *Store) roomForUpload(ctx context.Context, thread, by string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := pendingScript.Run(ctx, s.rdb, []string{s.attKey(thread), s.metaKey(thread)}, append([]any{s.pendingSince(), by}, roomLimits()...)...).Slice()
	if err != nil || len(r) != 2 {
		return s.unavailable("upload", err)
	}
	if mark, _ := r[1].(string); mark != "" {
		return markedUnreadable(thread, mark)
	}
	res, _ := r[0].(string)
	return roomRefusal(res)
}

// pendingSince is the time (ms) after which an upload no message names
// is still pending (kept, and counted by LimitAttachmentPending).
func (s *Store) pendingSince() int64 {
	_, ttl := chatrelay.LimitAttachmentUnused.Duration()
	return s.now().Add(-ttl).UnixMilli()
}

// roomLua defines room(att, before, by, sha, size, pre), store.Room in
// Lua: "" if the upload of by (a participant's id; "" the owner) of the
// bytes sha (size bytes) fits the thread of the att hash att, else
// "pending" (the owner: it holds LimitAttachmentPending uploads no message
// names, made after before, ms), "drafts" (a participant: it holds
// LimitParticipantPending of them), "full" (the bytes of the files
// messages name and of by's drafts, and these counted as new unless one
// of those holds them, would pass LimitThreadAttachments) or "draftbytes"
// (a participant: its drafts' bytes would pass
// LimitParticipantDraftBytes). pre: the check before the bytes are taken
// in, counts alone. Each uploader is judged on its own drafts and the
// uploads messages name: another's drafts count for it as nothing.
const roomLua = `
local function room(att, before, by, sha, size, pre, most, maxPending, maxDrafts, maxDraftBytes)
  -- Its own drafts first (the records by it that no message names, made
  -- after before; a record with no "by" is the owner's); the named files
  -- only when the thread's stored bytes could take it past most: what it
  -- holds is among them.
  local fs = redis.call('HKEYS', att)
  local used = {}
  for _, f in ipairs(fs) do
    if string.sub(f, 1, 2) == 'u:' then used[string.sub(f, 3)] = true end
  end
  local n, draftBytes, drafts = 0, 0, {}
  for _, f in ipairs(fs) do
    if string.sub(f, 1, 3) == 'at_' and not used[f] then
      local ok, a = pcall(cjson.decode, redis.call('HGET', att, f) or '')
      if ok and type(a) == 'table' and (tonumber(a.at) or 0) > before then
        local of = a.by
        if type(of) ~= 'string' then of = '' end
        if of == by then
          n = n + 1
          if type(a.sha256) == 'string' and not drafts[a.sha256] then
            drafts[a.sha256] = true
            draftBytes = draftBytes + (tonumber(a.size) or 0)
          end
        end
      end
    end
  end
  if by == '' then
    if n >= maxPending then return 'pending' end
  elseif n >= maxDrafts then
    return 'drafts'
  end
  if pre then return '' end
  if not drafts[sha] and (tonumber(redis.call('HGET', att, '.bytes')) or 0) + size > most then
    local seen, mine = {}, draftBytes
    for h in pairs(drafts) do seen[h] = true end
    for id in pairs(used) do
      local ok, a = pcall(cjson.decode, redis.call('HGET', att, id) or '')
      if ok and type(a) == 'table' and type(a.sha256) == 'string' and not seen[a.sha256] then
        seen[a.sha256] = true
        mine = mine + (tonumber(a.size) or 0)
      end
    end
    if not seen[sha] and mine + size > most then return 'full' end
  end
  if by ~= '' and not drafts[sha] and draftBytes + size > maxDraftBytes then return 'draftbytes' end
  return ''
end
`

// roomRefusal is the refusal a room (roomLua) answered, or nil.
func roomRefusal(res string) error {
	switch res {
	case "pending":
		return store.TooManyPending()
	case "drafts":
		return store.TooManyDrafts()
	case "full":
		return store.ThreadFull()
	case "draftbytes":
		return store.DraftsFull()
	}
	return nil
}

// pendingScript answers {room's answer before the bytes are taken in
// (roomLua, pre), the thread's unreadable mark or ""} (unreadable.go: an
// upload into a marked thread is refused before its bytes are taken in).
// KEYS: the thread's att hash and meta. ARGV: before (ms), the uploader,
// and the limits (roomLimits).
var pendingScript = redis.NewScript(roomLua + `
local mark = redis.call('HGET', KEYS[2], '` + markField + `')
if mark then return {'', mark} end
return {room(KEYS[1], tonumber(ARGV[1]), ARGV[2], '', 0, true, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])), ''}
`)

// roomLimits are room's limits (roomLua), as a script's last arguments:
// the thread's most bytes, the owner's most drafts, a participant's most
// drafts and their most bytes.
func roomLimits() []any {
	return []any{chatrelay.LimitThreadAttachments.Max, chatrelay.LimitAttachmentPending.Max,
		chatrelay.LimitParticipantPending.Max, chatrelay.LimitParticipantDraftBytes.Max}
}

// roomForThread refuses (ThreadLimit) an upload that would start a thread
// (one with no place in the thread limit) when the store holds the most
// threads it may: with sh, all of its shards together (s is one). It is
// asked before the bytes are taken in; commitScript decides, atomically.
func (s *Store) roomForThread(ctx context.Context, thread string, sh *Sharded) error {
	bctx, cancel := s.bound(ctx)
	defer cancel()
	var in, placed *redis.FloatCmd
	var n, m *redis.IntCmd
	_, err := s.rdb.Pipelined(bctx, func(p redis.Pipeliner) error {
		in = p.ZScore(bctx, s.index, thread)
		placed = p.ZScore(bctx, s.places, thread)
		n = p.ZCard(bctx, s.index)
		m = p.ZCard(bctx, s.places)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.unavailable("upload", err)
	}
	if in.Err() == nil || placed.Err() == nil {
		return nil
	}
	held := n.Val() + m.Val()
	if sh != nil && held < int64(s.opt.MaxThreads) {
		others, err := sh.threadsBut(ctx, sh.ShardOf(thread))
		if err != nil {
			return err
		}
		held += others
	}
	if held >= int64(s.opt.MaxThreads) {
		return chatrelay.Errorf(chatrelay.ThreadLimit, "thread limit reached")
	}
	return nil
}

// threads answers how many places the store's thread limit has taken:
// the threads of the index and those that hold uploads alone.
func (s *Store) threads(ctx context.Context) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n, m *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		n = p.ZCard(ctx, s.index)
		m = p.ZCard(ctx, s.places)
		return nil
	})
	if err != nil {
		return 0, s.unavailable("threads", err)
	}
	return n.Val() + m.Val(), nil
}

// appender writes an upload to its staging key a chunk at a time: it
// gathers chunkSize bytes, then stores them as the next field (HSET),
// keeping the key's expiry.
type appender struct {
	ctx  context.Context
	s    *Store
	key  string
	buf  []byte  // the chunk being gathered
	bufp *[]byte // buf's, from chunkBufs: given back by release
	i    int     // the index of the chunk being gathered
	n    int64   // the bytes stored
}

func (w *appender) Write(b []byte) (int, error) {
	k := len(b)
	for len(b) > 0 {
		if w.buf == nil {
			w.bufp = chunkBufs.Get().(*[]byte)
			w.buf = (*w.bufp)[:0:chunkSize]
		}
		c := copy(w.buf[len(w.buf):cap(w.buf)], b)
		w.buf = w.buf[:len(w.buf)+c]
		b = b[c:]
		if len(w.buf) == chunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return k, nil
}

// chunkBufs are the appenders' chunk buffers (chunkSize), reused from
// upload to upload: an upload allocates none.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// release gives the appender's buffer back to chunkBufs: it writes no more.
func (w *appender) release() {
	if w.bufp != nil {
		chunkBufs.Put(w.bufp)
		w.buf, w.bufp = nil, nil
	}
}

// flush stores the bytes gathered (if any) as the next chunk.
func (w *appender) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	ctx, cancel := w.s.bound(w.ctx)
	defer cancel()
	_, err := w.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "HSET", w.key, strconv.Itoa(w.i), w.buf) // the bytes as they are: no copy into a string
		p.PExpire(ctx, w.key, stagingTTL)
		return nil
	})
	if err != nil {
		return err
	}
	w.n += int64(len(w.buf))
	w.i++
	w.buf = w.buf[:0]
	return nil
}

// commitScript makes a received upload the thread's. KEYS: the thread's
// att hash, the staging key, the bytes' key, the thread's meta, the
// thread index, att-places, the thread's grants. ARGV: id,
// record JSON, sha, size, the thread's most bytes, "1" if the staging key
// holds the bytes (an empty file has none), the time (ms) after which an
// upload no message names is pending, the most pending uploads, the
// chunks the staging key was sent, the thread, the most threads, now
// (ms), the version of the grants record the uploader's grant was checked
// in, "1" if it has one (Upload.Grant), the uploader (Upload.By: a
// participant's id, or "" for the owner), a participant's most drafts
// and their most bytes. It answers "retry" (the grants
// record changed since: nothing is kept, the staging key stays), or
// answers "ok", "thread_limit" (the thread has no place in the thread
// limit, neither in the index nor in att-places, and they hold the most
// threads: nothing is kept but the staging key, for the caller to try
// again with more room or delete), "pending", "drafts", "full" or
// "draftbytes" (the upload does not fit what the uploader may hold:
// roomLua; nothing is kept),
// "unreadable" (the thread is marked unreadable: unreadable.go; nothing
// is kept) or "lost" (the staging key lacks chunks it was sent: Redis
// lost data meanwhile; nothing is kept). An upload kept into a thread
// that had no place gives it one in att-places.
var commitScript = redis.NewScript(roomLua + `
local att, stage, blob = KEYS[1], KEYS[2], KEYS[3]
if (ARGV[14] == '1' or ARGV[14] == 'true') and (redis.call('HGET', KEYS[7], '.v') or '') ~= ARGV[13] then
  return 'retry'
end
if redis.call('HEXISTS', KEYS[4], '` + markField + `') == 1 then
  redis.call('DEL', stage)
  return 'unreadable'
end
local place = not redis.call('ZSCORE', KEYS[5], ARGV[10]) and not redis.call('ZSCORE', KEYS[6], ARGV[10])
if place and redis.call('ZCARD', KEYS[5]) + redis.call('ZCARD', KEYS[6]) >= tonumber(ARGV[11]) then
  return 'thread_limit'
end
local id, rec, sha, size = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local refused = room(att, tonumber(ARGV[7]), ARGV[15], sha, size, false, tonumber(ARGV[5]), tonumber(ARGV[8]), tonumber(ARGV[16]), tonumber(ARGV[17]))
if refused ~= '' then
  redis.call('DEL', stage)
  return refused
end
local held = tonumber(redis.call('HGET', att, 'b:' .. sha) or '0') > 0
if held then
  redis.call('DEL', stage)
else
  if ARGV[6] == 'true' or ARGV[6] == '1' then
    if redis.call('HLEN', stage) ~= tonumber(ARGV[9]) then
      redis.call('DEL', stage)
      return 'lost'
    end
    redis.call('RENAME', stage, blob)
    redis.call('PERSIST', blob)
  else
    redis.call('SET', blob, '')
  end
  redis.call('HINCRBY', att, '.bytes', size)
end
redis.call('HINCRBY', att, 'b:' .. sha, 1)
redis.call('HSET', att, id, rec)
if place then redis.call('ZADD', KEYS[6], ARGV[12], ARGV[10]) end
return 'ok'
`)

// orphanLua defines orphaned(a, now): whether a, the decoded record of
// an upload no message names, was uploaded with a grant (a share link's
// or a device's: its "grant", or a participant's "by" in a record stored
// before "grant" was kept) that has ended at now (ms): revoked, past its
// expiry, or gone from the thread's grants record K.grants (ended long
// ago), as store.StoredAttachment.Orphaned. A grants record that cannot
// be read ends no grant here (its uploads wait for their hour).
const orphanLua = `
local endedGrants = {}
local function orphaned(a, now)
  local id = a.grant
  if type(id) ~= 'string' or id == '' then id = a.by end
  if type(id) ~= 'string' or id == '' or string.sub(id, 1, 1) == '.' then return false end
  if endedGrants[id] == nil then
    local js = redis.pcall('HGET', K.grants, id)
    local ended = false
    if not js then
      ended = true
    elseif type(js) == 'string' then
      local ok, g = pcall(cjson.decode, js)
      ended = ok and type(g) == 'table' and ((tonumber(g.revoked_at) or 0) ~= 0 or now >= (tonumber(g.expires_at) or math.huge))
    end
    endedGrants[id] = ended
  end
  return endedGrants[id]
end
`

// collectScript drops a thread's uploads that no message names and that
// were uploaded at or before ARGV[1] (ms) or whose grant has ended at
// ARGV[3] (ms, now: orphanLua), and their bytes if no record holds them;
// a thread left with none, or in the index (whose place is there), leaves
// att-places (ARGV[2] is the thread). KEYS: Store.keys. It answers how
// many uploads the thread keeps.
// (A pending upload's staging key is not the hash's: it expires.) A thread
// marked unreadable (unreadable.go) is kept as it is: -1. A revoke, or an
// expiry noted, runs it at once (Store.dropDrafts), so that the ended
// grant's uploads no message names go with it.
var collectScript = redis.NewScript(luaCommon + orphanLua + `
if redis.call('HEXISTS', K.meta, '` + markField + `') == 1 then return -1 end
local before, now = tonumber(ARGV[1]), tonumber(ARGV[3])
local left = 0
local fs = redis.call('HGETALL', K.att)
for i = 1, #fs, 2 do
  local id = fs[i]
  if string.sub(id, 1, 3) == 'at_' then
    local ok, a = pcall(cjson.decode, fs[i + 1])
    if redis.call('HEXISTS', K.att, 'u:' .. id) == 0 and (not ok or type(a) ~= 'table' or (tonumber(a.at) or 0) <= before or orphaned(a, now)) then
      releaseAtt(id)
    else
      left = left + 1
    end
  end
end
if left == 0 then
  for _, f in ipairs(redis.call('HKEYS', K.att)) do
    if string.sub(f, 1, 2) == 'b:' then redis.call('DEL', K.att .. ':' .. string.sub(f, 3)) end
  end
  redis.call('DEL', K.att)
end
if left == 0 or redis.call('ZSCORE', K.index, ARGV[2]) then redis.call('ZREM', K.places, ARGV[2]) end
return left
`)

// OpenAttachment implements store.Attachments: the bytes are read a
// chunk at a time (HGET), never whole. The record and its mark (u:<id>:
// a message names it) are read together.
func (s *Store) OpenAttachment(ctx context.Context, thread, id, reader string) (chatrelay.Attachment, io.ReadSeekCloser, error) {
	if err := store.CheckAttachmentRef(thread, id); err != nil {
		return chatrelay.Attachment{}, nil, err
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	vals, err := s.rdb.HMGet(bctx, s.attKey(thread), id, "u:"+id).Result()
	if err != nil {
		return chatrelay.Attachment{}, nil, s.unavailable("attachment", err)
	}
	js, ok := vals[0].(string)
	if !ok {
		return chatrelay.Attachment{}, nil, store.NoAttachment(id)
	}
	var rec store.StoredAttachment
	if err := json.Unmarshal([]byte(js), &rec); err != nil || rec.ID != id {
		return chatrelay.Attachment{}, nil, s.unavailable("attachment", fmt.Errorf("record %s of %s: %v", id, thread, err))
	}
	if _, used := vals[1].(string); !rec.OpensFor(reader, used) {
		return chatrelay.Attachment{}, nil, store.NoAttachment(id)
	}
	return rec.Attachment, &rangeReader{ctx: ctx, s: s, key: s.blobKey(thread, rec.SHA256), size: rec.Size, chunk: -1, id: id, thread: thread}, nil
}

// lostBytes is the NotFound of an attachment whose record Redis holds but
// not all of its bytes: Redis lost them (it restarted without its data,
// or failed over to a replica that lacked them), or the attachment was
// collected since its record was read.
func (s *Store) lostBytes(thread, id string, have, want int64) error {
	s.log.Warn("attachment: Redis lacks chunks of its bytes", "thread", thread, "attachment", id, "chunks", have, "want", want)
	return chatrelay.Errorf(chatrelay.NotFound, "the bytes of attachment %s are gone from the store", id)
}

// rangeReader reads a stored attachment a chunk at a time, keeping the
// chunk last read (a reader asks for less than a chunk at once). Its
// first read counts the chunks too (in the same round trip): a file
// whose chunks Redis lost is refused (NotFound) by the read a server
// makes before it answers (the file's first bytes, which say its type),
// not cut after a 200; only a loss after that first read cuts a body.
type rangeReader struct {
	ctx        context.Context
	s          *Store
	key        string
	size       int64
	off        int64
	chunk      int64  // the index of cur; -1: none
	cur        []byte // the bytes of chunk
	flat       bool   // the bytes are a string (stored before they were chunked)
	counted    bool   // the chunks were counted (the first read)
	id, thread string // for lostBytes
}

func (r *rangeReader) Read(b []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	if r.flat {
		return r.readFlat(b)
	}
	i := r.off / chunkSize
	if i != r.chunk {
		want := (r.size + chunkSize - 1) / chunkSize
		ctx, cancel := r.s.bound(r.ctx)
		var get *redis.StringCmd
		var count *redis.IntCmd
		_, err := r.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			get = p.HGet(ctx, r.key, strconv.FormatInt(i, 10))
			if !r.counted {
				count = p.HLen(ctx, r.key)
			}
			return nil
		})
		cancel()
		v, gerr := get.Bytes()
		if gerr != nil && strings.HasPrefix(gerr.Error(), "WRONGTYPE") {
			r.flat = true
			return r.readFlat(b)
		}
		if count != nil {
			if n, cerr := count.Result(); cerr == nil {
				r.counted = true
				if n != want {
					return 0, r.s.lostBytes(r.thread, r.id, n, want)
				}
			}
		}
		if errors.Is(gerr, redis.Nil) {
			return 0, r.s.lostBytes(r.thread, r.id, -1, want) // lost, or collected meanwhile
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, r.s.unavailable("attachment", err)
		}
		r.chunk, r.cur = i, v
	}
	at := r.off - i*chunkSize
	if at >= int64(len(r.cur)) {
		return 0, io.ErrUnexpectedEOF
	}
	k := copy(b, r.cur[at:])
	r.off += int64(k)
	return k, nil
}

// readFlat reads bytes stored as one string, by a version that did not
// chunk them (GETRANGE).
func (r *rangeReader) readFlat(b []byte) (int, error) {
	n := min(int64(len(b)), r.size-r.off, chunkSize)
	ctx, cancel := r.s.bound(r.ctx)
	defer cancel()
	v, err := r.s.rdb.GetRange(ctx, r.key, r.off, r.off+n-1).Result()
	if err != nil {
		return 0, r.s.unavailable("attachment", err)
	}
	if len(v) == 0 {
		return 0, io.ErrUnexpectedEOF // collected meanwhile
	}
	k := copy(b, v)
	r.off += int64(k)
	return k, nil
}

func (r *rangeReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += r.off
	case io.SeekEnd:
		off += r.size
	}
	if off < 0 {
		return 0, errors.New("redisstore: seek before the start")
	}
	r.off = off
	return off, nil
}

func (r *rangeReader) Close() error { return nil }

// attachments reads the uploads a post names, for its v2 object (the
// script checks again, atomically, that each is an unused upload of the
// thread). An upload no message named within the hour is gone. refused is
// the index of the first id the post may not name that only this read can
// tell (an upload no post named within the hour, another's draft in a
// participant's post), or -1: the script refuses it, at its place among
// the checks (after the thread's existence, a repeat's replay and the
// participant's) and among the ids (after an unknown or used one the
// post names before it), as the file store does.
func (s *Store) attachments(ctx context.Context, thread string, m store.NewMessage) (out []chatrelay.Attachment, refused int, err error) {
	refused = -1
	if len(m.Attachments) == 0 {
		return nil, refused, nil
	}
	fields := make([]string, 0, 2*len(m.Attachments))
	for _, id := range m.Attachments {
		fields = append(fields, id, "u:"+id)
	}
	vals, err := s.rdb.HMGet(ctx, s.attKey(thread), fields...).Result()
	if err != nil {
		return nil, refused, s.unavailable("append", err)
	}
	now := s.now()
	out = make([]chatrelay.Attachment, len(m.Attachments))
	for i, id := range m.Attachments {
		js, ok := vals[2*i].(string)
		var rec store.StoredAttachment
		if ok && json.Unmarshal([]byte(js), &rec) == nil && rec.ID == id {
			out[i] = rec.Attachment
			_, used := vals[2*i+1].(string)
			if rec.OpensFor(m.Participant, used) && (used || !rec.Unused(now)) {
				continue // (a used one is refused by the script, unless the post is a repeat)
			}
		}
		// Unknown (the script finds it so too), an upload no post named
		// within the hour, or another's draft in a participant's post
		// (its uploader is kept in the record, which never changes).
		out[i].ID = id
		if refused < 0 {
			refused = i
		}
	}
	return out, refused, nil
}

// sweepUploads collects the uploads of every thread that has some: those
// no message named within the hour go, with their bytes. The threads of
// att-places are collected too, listed in att-threads or not: a place
// whose uploads are gone is freed.
func (s *Store) sweepUploads(ctx context.Context) error {
	lctx, cancel := s.bound(ctx)
	var listed, placed *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(lctx, func(p redis.Pipeliner) error {
		listed = p.ZRange(lctx, s.attThreadsKey(), 0, -1)
		placed = p.ZRange(lctx, s.places, 0, -1)
		return nil
	})
	cancel()
	if err != nil {
		return s.unavailable("sweep", err)
	}
	names := listed.Val()
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		seen[name] = true
	}
	for _, name := range placed.Val() {
		if !seen[name] {
			names = append(names, name)
		}
	}
	_, ttl := chatrelay.LimitAttachmentUnused.Duration()
	before := s.now().Add(-ttl).UnixMilli()
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !chatrelay.ValidThread(name) {
			continue
		}
		sctx, cancel := s.bound(ctx)
		err := collectScript.Run(sctx, s.rdb, s.keys(name), before, name, s.now().UnixMilli()).Err()
		cancel()
		if err != nil {
			return s.unavailable("sweep", err)
		}
	}
	// A thread whose newest upload is past the hour has no upload left
	// to collect (those its messages name go with them).
	sctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.rdb.ZRemRangeByScore(sctx, s.attThreadsKey(), "-inf", strconv.FormatInt(before, 10)).Err(); err != nil {
		return s.unavailable("sweep", err)
	}
	return nil
}

// dropDrafts collects thread's uploads (collectScript) once a grant of
// it has ended (revoked, or its expiry noted): the grant's uploads that
// no message names go at once, with their bytes unless another record
// holds them. The script reads the grant's state itself, so an upload
// racing the revoke is either committed before it (and goes here) or
// refused by commitScript (the grants record's version changed). A
// failure is logged: the sweep collects them in its turn.
func (s *Store) dropDrafts(ctx context.Context, thread string) {
	ctx, cancel := s.bound(context.WithoutCancel(ctx))
	defer cancel()
	if err := collectScript.Run(ctx, s.rdb, s.keys(thread), s.pendingSince(), thread, s.now().UnixMilli()).Err(); err != nil {
		s.log.Warn("attachments of an ended grant", "thread", thread, "err", err)
	}
}
