package redisstore

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Participants (contract Part 3) on Redis. A thread's participants record
// is one hash, <prefix>{T}:grants:
//
//	<grant id>  the grant's JSON (chatrelay.Grant: never a token, only the
//	            SHA-256 digest of one)
//	.order      the grant ids, oldest first, separated by spaces
//	.v          the record's version, raised by every write
//
// Every write is a script that writes only if .v is still the version
// read (compare and set; grantsScript, or appendScript for a
// participant's post, which counts the post in the same step), and that
// tells the feed ("<thread> P"), so that every node looks at the grants
// of its open streams again. A record that does not parse (a value that
// is not a grant of its field's id, with its digest and expiry, or an
// .order or .v that does not match) fails closed: the thread's share
// tokens are refused and nothing writes over it.
//
// <prefix>grant-index is a hash from the first 16 hex of each digest to
// its thread, so that a share token finds its thread on any node; the
// thread's record then decides, by a constant-time comparison of the
// whole digest. The audit is a list, <prefix>{T}:audit, of the events'
// JSON, oldest first, cut to what store.KeptAudit keeps once it holds
// twice chatrelay.LimitAuditKept (auditScript). The sweep that removes a thread
// removes its record, its audit and its index entries.

var _ store.Participants = (*Store)(nil)

// grantsRecord is a thread's participants record as read.
type grantsRecord struct {
	version string            // "" if the thread has none
	grants  []chatrelay.Grant // oldest first, without those chatrelay.PruneGrants drops
	dropped []chatrelay.Grant // those: the next write of the record removes them
}

func (r *grantsRecord) find(id string) int {
	return slices.IndexFunc(r.grants, func(g chatrelay.Grant) bool { return g.ID == id })
}

var errBadRecord = errors.New("not a participants record")

// parseGrants decodes a record's fields.
func parseGrants(fields map[string]string) (grantsRecord, error) {
	if len(fields) == 0 {
		return grantsRecord{}, nil
	}
	rec := grantsRecord{version: fields[".v"]}
	if v, err := strconv.ParseInt(rec.version, 10, 64); err != nil || v <= 0 {
		return grantsRecord{}, fmt.Errorf("%w: version %q", errBadRecord, rec.version)
	}
	raw, ok := fields[".order"] // not read as "": a record without it would take a stray grant field as its second field
	order := strings.Fields(raw)
	if !ok || len(order) != len(fields)-2 {
		return grantsRecord{}, fmt.Errorf("%w: %d grants in its order, %d fields", errBadRecord, len(order), len(fields))
	}
	rec.grants = make([]chatrelay.Grant, 0, len(order))
	for i, id := range order {
		js, ok := fields[id]
		if !ok || strings.HasPrefix(id, ".") || slices.Contains(order[:i], id) {
			return grantsRecord{}, fmt.Errorf("%w: grant %d of its order (%q) is missing or twice", errBadRecord, i, id)
		}
		var g chatrelay.Grant
		dec := json.NewDecoder(strings.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&g); err != nil || dec.More() {
			return grantsRecord{}, fmt.Errorf("%w: grant %q: %v", errBadRecord, id, err)
		}
		if err := chatrelay.CheckGrant(g); err != nil || g.ID != id {
			return grantsRecord{}, fmt.Errorf("%w: grant %q %v", errBadRecord, id, err)
		}
		rec.grants = append(rec.grants, g)
	}
	return rec, nil
}

// readGrants reads the thread's participants record: ParticipantsUnreadable
// if it does not parse.
func (s *Store) readGrants(ctx context.Context, thread string) (grantsRecord, error) {
	fields, err := s.rdb.HGetAll(ctx, s.grantsKey(thread)).Result()
	if err != nil && !isWrongType(err) {
		return grantsRecord{}, s.unavailable("participants", err)
	}
	rec, perr := parseGrants(fields)
	if err != nil {
		perr = fmt.Errorf("%w: %v", errBadRecord, err)
	}
	if perr != nil {
		s.log.Error("participants record does not parse; every share link of the thread is refused", "thread", thread, "err", perr)
		return grantsRecord{}, store.ParticipantsUnreadable(perr)
	}
	rec.grants, rec.dropped = chatrelay.PruneGrants(rec.grants, s.now())
	return rec, nil
}

func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// writeGrants runs grantsScript: it sets fields (pairs of field and value)
// and removes the grants rec dropped (chatrelay.PruneGrants), with their
// grant index entries, if the record's version is still rec's. It reports
// false if it is not (read again and retry).
func (s *Store) writeGrants(ctx context.Context, thread string, rec grantsRecord, needLog bool, index, order string, ev grantEvent, fields ...string) (bool, error) {
	need := "0"
	if needLog {
		need = "1"
	}
	var drop, prefixes []string
	for _, g := range rec.dropped {
		drop = append(drop, g.ID)
		p := g.Digest[:16]
		if p != index && !slices.ContainsFunc(rec.grants, func(k chatrelay.Grant) bool { return k.Digest[:16] == p }) {
			prefixes = append(prefixes, p) // another grant's too: its entry stays
		}
	}
	args := []any{thread, rec.version, s.pubFeed, need, index, order, strings.Join(drop, " "), strings.Join(prefixes, " "),
		ev.typ, ev.at, ev.participant}
	for _, f := range fields {
		args = append(args, f)
	}
	if s.beforeCAS != nil {
		s.beforeCAS("grants")
	}
	res, err := grantsScript.Run(ctx, s.rdb, s.keys(thread), args...).Text()
	if err != nil {
		return false, s.unavailable("participants", err)
	}
	switch res {
	case "ok":
		return true, nil
	case "retry":
		return false, nil
	case "not_found":
		return false, chatrelay.Errorf(chatrelay.NotFound, "this thread has no message yet: post one before inviting")
	case "unreadable":
		return false, markedUnreadable(thread, "found by a read")
	}
	return false, s.unavailable("participants", fmt.Errorf("unexpected answer %q", res))
}

// grantEvent is the webhook event a write of grants queues (outbox.go);
// the zero value queues none.
type grantEvent struct {
	typ         string
	at          int64
	participant string
}

// Invite implements store.Participants.
func (s *Store) Invite(ctx context.Context, thread string, g chatrelay.Grant) error {
	if err := chatrelay.CheckThread(thread); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for {
		rec, err := s.readGrants(ctx, thread)
		if err != nil {
			return err
		}
		g, err := chatrelay.AdmitGrant(rec.grants, g, s.now())
		if err != nil {
			return err
		}
		js, _ := json.Marshal(g)
		ok, err := s.writeGrants(ctx, thread, rec, true, g.Digest[:16], g.ID, grantEvent{}, g.ID, string(js))
		if ok || err != nil {
			return err
		}
	}
}

// Grants implements store.Participants.
func (s *Store) Grants(ctx context.Context, thread string) ([]chatrelay.Grant, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rec, err := s.readGrants(ctx, thread)
	if err != nil {
		return nil, err
	}
	slices.Reverse(rec.grants) // newest first
	return rec.grants, nil
}

// Grant implements store.Participants.
func (s *Store) Grant(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	return store.GrantOf(ctx, s, thread, id)
}

// Revoke implements store.Participants.
func (s *Store) Revoke(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	var out chatrelay.Grant
	err := s.updateGrant(ctx, thread, id, true, func(g *chatrelay.Grant) bool {
		if g.RevokedAt != 0 {
			return false
		}
		g.RevokedAt = s.now().UnixMilli()
		return true
	}, &out)
	if err == nil {
		s.dropDrafts(ctx, thread) // (revoked again too: what an earlier revoke left)
	}
	return out, err
}

// MarkUsed implements store.Participants.
func (s *Store) MarkUsed(ctx context.Context, thread, id string) (bool, error) {
	return s.markGrant(ctx, thread, id, func(g *chatrelay.Grant) *bool { return &g.Used })
}

// Seen implements store.Participants.
func (s *Store) Seen(ctx context.Context, thread, id string, at int64) (bool, error) {
	first := false
	err := s.updateGrant(ctx, thread, id, false, func(g *chatrelay.Grant) bool {
		first = false // fn runs again after a write that lost the race: only the last run counts
		if g.Used && g.LastSeen >= at {
			return false
		}
		first = !g.Used
		g.Used, g.LastSeen = true, max(g.LastSeen, at)
		return true
	}, nil)
	return first && err == nil, err
}

// NoteExpired implements store.Participants.
// The expired grant's uploads that no message names go with the note.
func (s *Store) NoteExpired(ctx context.Context, thread, id string) (bool, error) {
	first, err := s.markGrant(ctx, thread, id, func(g *chatrelay.Grant) *bool { return &g.ExpiryNoted })
	if err == nil {
		s.dropDrafts(ctx, thread)
	}
	return first, err
}

// markGrant sets the flag of a grant that flag points to, and reports
// whether it was not set before. An unknown grant changes nothing.
func (s *Store) markGrant(ctx context.Context, thread, id string, flag func(*chatrelay.Grant) *bool) (bool, error) {
	first := false
	err := s.updateGrant(ctx, thread, id, false, func(g *chatrelay.Grant) bool {
		first = false // fn runs again after a write that lost the race: only the last run counts
		if *flag(g) {
			return false
		}
		*flag(g), first = true, true
		return true
	}, nil)
	return first && err == nil, err
}

// updateGrant applies fn to grant id of thread and writes it if fn says
// it changed, retrying while another write came first; out, if not nil,
// gets the grant as it is then. An unknown grant is NotFound if
// mustExist, else nothing.
func (s *Store) updateGrant(ctx context.Context, thread, id string, mustExist bool, fn func(*chatrelay.Grant) bool, out *chatrelay.Grant) error {
	if err := chatrelay.CheckThread(thread); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for {
		rec, err := s.readGrants(ctx, thread)
		if err != nil {
			return err
		}
		i := rec.find(id)
		if i < 0 {
			if mustExist {
				return chatrelay.Errorf(chatrelay.NotFound, "no participant %q in this thread", id)
			}
			return nil
		}
		g := rec.grants[i]
		changed := fn(&g)
		if out != nil {
			*out = g
		}
		if !changed {
			return nil
		}
		var ev grantEvent
		if s.hooks {
			if ev.typ = store.GrantEventOf(&rec.grants[i], &g); ev.typ != "" {
				now := s.now()
				p, _ := json.Marshal(g.Participant(now))
				ev.at, ev.participant = now.UnixMilli(), string(p)
			}
		}
		js, _ := json.Marshal(g)
		ok, err := s.writeGrants(ctx, thread, rec, false, "", "", ev, g.ID, string(js))
		if ok || err != nil {
			return err
		}
	}
}

// Resolve implements store.Participants.
func (s *Store) Resolve(ctx context.Context, digest string) (string, chatrelay.Grant, error) {
	unauthorized := chatrelay.UnknownShareLink()
	if len(digest) != 64 {
		return "", chatrelay.Grant{}, unauthorized
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	thread, err := s.rdb.HGet(ctx, s.gindex, digest[:16]).Result()
	if err == redis.Nil || err == nil && !chatrelay.ValidThread(thread) {
		return "", chatrelay.Grant{}, unauthorized
	}
	if err != nil {
		return "", chatrelay.Grant{}, s.unavailable("participants", err)
	}
	rec, err := s.readGrants(ctx, thread)
	if err != nil {
		if chatrelay.CodeOf(err) == chatrelay.ParticipantsUnreadable {
			return "", chatrelay.Grant{}, unauthorized // fail closed
		}
		return "", chatrelay.Grant{}, err
	}
	for _, g := range rec.grants {
		if subtle.ConstantTimeCompare([]byte(g.Digest), []byte(digest)) == 1 {
			return thread, g, nil
		}
	}
	return "", chatrelay.Grant{}, unauthorized
}

// Audit implements store.Participants: the event is pushed on the
// thread's audit list by auditScript, which past twice LimitAuditKept
// entries cuts the list to the events store.KeptAudit keeps (refusals go
// first), in the same step.
func (s *Store) Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) error {
	if err := chatrelay.CheckThread(thread); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	js, _ := json.Marshal(ev)
	if err := auditScript.Run(ctx, s.rdb, []string{s.auditKey(thread), s.logKey(thread)}, js, chatrelay.LimitAuditKept.Max).Err(); err != nil {
		return s.unavailable("audit", err)
	}
	return nil
}

// auditScript pushes an event (ARGV[1]) on an audit list (KEYS[1]) and,
// once the list holds more than twice the bound (ARGV[2]), cuts it to
// what store.KeptAudit keeps: past the bound the oldest refusals go, then
// the oldest other events. Cutting only past twice the bound keeps an
// append O(1) amortised (one pass over 2 000 entries every 1 000
// appends), as the file store's rewrite does; AuditLog applies the same
// rule to what it reads, so the answer does not depend on when the list
// was last cut. The list and its values are the previous version's (an
// RPUSH of the event's JSON, an LRANGE of the newest 1 000), so nodes of
// both can share it during a rolling deploy.
//
// The event of a thread whose log (KEYS[2]) is empty, a thread that has
// no message (removed by the sweep while the request that is audited
// ran), is not kept: nothing would remove it, and the thread made again
// with the same token would find it (the file store keeps none either).
//
// An event is a refusal if its JSON holds "event":"refused": the store
// writes it with encoding/json, which escapes every quote inside a
// string, so no other field can hold the pattern.
var auditScript = redis.NewScript(`
if redis.call('XLEN', KEYS[2]) == 0 then return 0 end
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local bound = tonumber(ARGV[2])
if n <= 2 * bound then return n end
local all = redis.call('LRANGE', KEYS[1], 0, -1)
local refused = {}
local nrefused = 0
for i, v in ipairs(all) do
  if string.find(v, '"event":"refused"', 1, true) then
    refused[i] = true
    nrefused = nrefused + 1
  end
end
local drop = #all - bound
local dropOthers = math.max(0, drop - nrefused)
local kept = {}
for i, v in ipairs(all) do
  if refused[i] and drop > 0 then
    drop = drop - 1
  elseif not refused[i] and dropOthers > 0 then
    dropOthers = dropOthers - 1
    drop = drop - 1
  else
    kept[#kept + 1] = v
  end
end
redis.call('DEL', KEYS[1])
for i = 1, #kept, 500 do
  redis.call('RPUSH', KEYS[1], unpack(kept, i, math.min(i + 499, #kept)))
end
return #kept
`)

// AuditLog implements store.Participants. An event that does not decode
// is left out, as the file store leaves out a torn line.
func (s *Store) AuditLog(ctx context.Context, thread string) ([]chatrelay.AuditEvent, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	vals, err := s.rdb.LRange(ctx, s.auditKey(thread), 0, -1).Result() // twice the bound at most (auditScript)
	if err != nil && err != redis.Nil {
		return nil, s.unavailable("audit", err)
	}
	events := make([]chatrelay.AuditEvent, 0, len(vals))
	for _, v := range vals {
		var e chatrelay.AuditEvent
		if json.Unmarshal([]byte(v), &e) == nil && e.Event != "" {
			events = append(events, e)
		}
	}
	return store.KeptAudit(events), nil
}
