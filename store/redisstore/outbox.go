package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Webhook events (store.Outbox) in Redis: one stream, <prefix>webhook:events,
// to which appendScript and changeScript add a change's event in the same
// script as the change (XADD: both or neither), and one consumer group per
// destination, named by its ID. A node reads new events with XREADGROUP
// (each goes to one consumer of the group, and stays in its pending list
// until XACK) and records each attempt's count and next time in the hash
// <prefix>webhook:retry:<destination> ("attempts next-ms"): when it takes
// an event it marks it in flight (leasedField), so that no other node
// claims it while it sends it, until Redis has seen it idle for
// WebhookLease (Redis's clock: the nodes' clocks may disagree). A failed
// attempt sets the next time from the schedule (the node's clock); any node whose XPENDING shows the event claims it once it
// is due (claimScript: check, lease and XCLAIM at once), so each event is
// sent by one node at a time, and one whose node died is sent again by
// another once its lease has passed. Delivered or dropped: XACK and HDEL.
// The stream is trimmed (XTRIM MINID) up to the oldest event some group
// still needs.
//
// Open with Options.Webhooks records the destinations (the hash
// <prefix>webhooks) and creates their groups at the stream's end; any
// store opened on the same prefix while that hash exists (another node,
// the host CLI) queues events, so events caused by every writer are sent.

const trimEvery = 10 * time.Second

func (s *Store) dests() string               { return s.prefix + "webhooks" }
func (s *Store) retryKey(dest string) string { return s.prefix + "webhook:retry:" + dest }

// setupHooks records the destinations and creates their groups (with
// Options.Webhooks), or finds whether a server recorded any.
func (s *Store) setupHooks(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if len(s.opt.Webhooks) == 0 {
		n, err := s.rdb.HLen(ctx, s.dests()).Result()
		if err != nil {
			return s.unavailable("webhooks", err)
		}
		s.hooks = n > 0
		return nil
	}
	s.hooks = true
	for _, d := range s.opt.Webhooks {
		if err := s.recordDest(ctx, d, "$"); err != nil {
			return err
		}
	}
	return nil
}

// recordDest records destination dest and creates its group, which starts
// after the stream's entry from ("$": its end).
func (s *Store) recordDest(ctx context.Context, dest, from string) error {
	if err := s.rdb.HSet(ctx, s.dests(), dest, "1").Err(); err != nil {
		return s.unavailable("webhooks", err)
	}
	err := s.rdb.XGroupCreateMkStream(ctx, s.events, dest, from).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return s.unavailable("webhooks", err)
	}
	return nil
}

// Outbox returns the store's queue of webhook events.
func (s *Store) Outbox() store.Outbox {
	s.outOnce.Do(func() { s.out = &outbox{s: s, consumer: "c-" + randomHex(8)} })
	return s.out
}

type outbox struct {
	s        *Store
	consumer string // this store's name in the groups
	mu       sync.Mutex
	trimmed  time.Time // when the stream was last trimmed
}

var _ store.Outbox = (*outbox)(nil)

// Take implements store.Outbox: new events first, then due retries.
func (o *outbox) Take(ctx context.Context, dest string, now time.Time, max int) ([]store.Due, error) {
	s := o.s
	ctx, cancel := s.bound(ctx)
	defer cancel()
	o.trim(ctx)
	var out []store.Due
	read := &redis.XReadGroupArgs{Group: dest, Consumer: o.consumer, Streams: []string{s.events, ">"}, Count: int64(max), Block: -1}
	res, err := s.rdb.XReadGroup(ctx, read).Result()
	if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
		// Redis lost its data (a restart without persistence) and the group
		// and the destinations' record with it: record them again, so that
		// every writer queues, and take the events queued since, which are
		// all of the new data set.
		if err := s.recordDest(ctx, dest, "0"); err != nil {
			return nil, err
		}
		res, err = s.rdb.XReadGroup(ctx, read).Result()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.unavailable("webhook take", err)
	}
	lease := fmt.Sprintf("0 %d", now.Add(chatrelay.WebhookLease).UnixMilli())
	var leases []any
	for _, st := range res {
		for _, m := range st.Messages {
			leases = append(leases, m.ID, lease, leasedField(m.ID), lease)
			out = append(out, due(m.ID, m.Values, 0))
		}
	}
	if len(leases) > 0 {
		// No WAIT (replicas.go): a lease a failover loses is claimed again.
		if err := s.rdb.HSet(noWait(ctx), s.retryKey(dest), leases...).Err(); err != nil {
			return nil, s.unavailable("webhook take", err) // taken all the same: claimed again once idle for a lease
		}
	}
	if len(out) >= max {
		return out, nil
	}
	pend, err := o.pending(ctx, dest)
	if err != nil {
		return out, s.unavailable("webhook take", err)
	}
	for _, p := range pend {
		if len(out) >= max {
			break
		}
		r, err := claimScript.Run(ctx, s.rdb, []string{s.events, s.retryKey(dest)}, dest, o.consumer,
			now.UnixMilli(), chatrelay.WebhookLease.Milliseconds(), p.ID).Slice()
		if errors.Is(err, redis.Nil) {
			continue // not due, or another node has it
		}
		if err != nil {
			return out, s.unavailable("webhook take", err)
		}
		if len(r) != 2 {
			continue
		}
		n, _ := r[0].(int64)
		vals := map[string]any{}
		if kv, ok := r[1].([]any); ok {
			for i := 0; i+1 < len(kv); i += 2 {
				k, _ := kv[i].(string)
				vals[k] = kv[i+1]
			}
		}
		out = append(out, due(p.ID, vals, int(n)))
	}
	return out, nil
}

// pending lists the destination's pending events, oldest first, at most
// pendingScan of them.
func (o *outbox) pending(ctx context.Context, dest string) ([]redis.XPendingExt, error) {
	var all []redis.XPendingExt
	start := "-"
	for len(all) < pendingScan {
		page, err := o.s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: o.s.events, Group: dest, Start: start, End: "+", Count: 100}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return all, err
		}
		all = append(all, page...)
		if len(page) < 100 {
			break
		}
		start = "(" + page[len(page)-1].ID
	}
	return all, nil
}

// pendingScan bounds the pending events a Take looks at for retries.
const pendingScan = 1000

// due makes a stream entry an event. A message without v2 fields is
// stored as its v1 object: its v2 object adds its rev.
func due(id string, v map[string]any, attempts int) store.Due {
	str := func(k string) string { x, _ := v[k].(string); return x }
	at, _ := strconv.ParseInt(str("at"), 10, 64)
	if p := str("p"); p != "" { // a participant's event
		return store.Due{Event: store.Event{ID: "evt_" + id, Type: str("t"), Thread: str("th"),
			At: time.UnixMilli(at).UTC(), Participant: []byte(p)}, Attempts: attempts}.WithToken(id)
	}
	msg := []byte(str("m"))
	var m chatrelay.Message
	if json.Unmarshal(msg, &m) == nil && m.Rev == 0 {
		m.Rev = m.Epoch
		msg = chatrelay.MarshalMessageV2(m)
	}
	return store.Due{Event: store.Event{ID: "evt_" + id, Type: str("t"), Thread: str("th"),
		At: time.UnixMilli(at).UTC(), Message: msg}, Attempts: attempts}.WithToken(id)
}

// Done implements store.Outbox.
func (o *outbox) Done(ctx context.Context, dest string, d store.Due) error {
	id, _ := d.Token().(string)
	ctx, cancel := o.s.bound(ctx)
	defer cancel()
	_, err := o.s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, o.s.events, dest, id)
		p.HDel(ctx, o.s.retryKey(dest), id, leasedField(id))
		return nil
	})
	if err != nil {
		return o.s.unavailable("webhook done", err)
	}
	return nil
}

// Retry implements store.Outbox.
func (o *outbox) Retry(ctx context.Context, dest string, d store.Due, at time.Time) error {
	id, _ := d.Token().(string)
	ctx, cancel := o.s.bound(ctx)
	defer cancel()
	_, err := o.s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, o.s.retryKey(dest), id, fmt.Sprintf("%d %d", d.Attempts+1, at.UnixMilli()))
		p.HDel(ctx, o.s.retryKey(dest), leasedField(id))
		return nil
	})
	if err != nil {
		return o.s.unavailable("webhook retry", err)
	}
	return nil
}

// goneKey is the hash of the destinations whose receiver answered 410
// Gone (store.Disabler): destination ID → when, in ms (the node's clock).
func (s *Store) goneKey() string { return s.prefix + "webhook:gone" }

var _ store.Disabler = (*outbox)(nil)

// Disable implements store.Disabler.
func (o *outbox) Disable(ctx context.Context, dest string) error {
	ctx, cancel := o.s.bound(ctx)
	defer cancel()
	if err := o.s.rdb.HSet(ctx, o.s.goneKey(), dest, o.s.now().UnixMilli()).Err(); err != nil {
		return o.s.unavailable("webhook disable", err)
	}
	return nil
}

// Disabled implements store.Disabler.
func (o *outbox) Disabled(ctx context.Context, dest string) (bool, error) {
	ctx, cancel := o.s.bound(ctx)
	defer cancel()
	ok, err := o.s.rdb.HExists(ctx, o.s.goneKey(), dest).Result()
	if err != nil {
		return false, o.s.unavailable("webhook disabled", err)
	}
	return ok, nil
}

// Enable implements store.Disabler.
func (o *outbox) Enable(ctx context.Context, dest string) error {
	ctx, cancel := o.s.bound(ctx)
	defer cancel()
	if err := o.s.rdb.HDel(ctx, o.s.goneKey(), dest).Err(); err != nil {
		return o.s.unavailable("webhook enable", err)
	}
	return nil
}

// leasedField is the retry hash's field that marks event id in flight:
// handed to a node, which holds it until Redis has seen it idle for
// chatrelay.WebhookLease (XPENDING IDLE, on Redis's clock: a node whose
// clock runs ahead of the holder's does not take it while it is sent).
// Its "attempts next-ms" field keeps the holder's clock + the lease, which
// chatrelay before this field read as the lease; the mark holds that same
// value, so that one such chatrelay's claim or retry, which rewrites the
// field and leaves the mark, is no longer taken as in flight (its retry
// is due at its time, not once idle for a lease).
func leasedField(id string) string { return "l:" + id }

// trim drops the stream's events that every group has settled, at most
// once per trimEvery: those before the oldest pending event of any
// group, and before every group's last read.
func (o *outbox) trim(ctx context.Context) {
	o.mu.Lock()
	if time.Since(o.trimmed) < trimEvery {
		o.mu.Unlock()
		return
	}
	o.trimmed = time.Now()
	o.mu.Unlock()
	s := o.s
	groups, err := s.rdb.XInfoGroups(ctx, s.events).Result()
	if err != nil || len(groups) == 0 {
		return
	}
	var min streamID
	for i, g := range groups {
		keep := parseID(g.LastDeliveredID).next()
		if g.Pending > 0 {
			p, err := s.rdb.XPending(ctx, s.events, g.Name).Result()
			if err != nil {
				return
			}
			keep = parseID(p.Lower)
		}
		if i == 0 || keep.less(min) {
			min = keep
		}
	}
	if min != (streamID{}) {
		s.rdb.XTrimMinID(noWait(ctx), s.events, min.String()) // retention: no WAIT (replicas.go)
	}
}

type streamID struct{ ms, seq uint64 }

func parseID(s string) streamID {
	a, b, _ := strings.Cut(s, "-")
	ms, _ := strconv.ParseUint(a, 10, 64)
	seq, _ := strconv.ParseUint(b, 10, 64)
	return streamID{ms, seq}
}

func (x streamID) next() streamID       { return streamID{x.ms, x.seq + 1} }
func (x streamID) less(y streamID) bool { return x.ms < y.ms || x.ms == y.ms && x.seq < y.seq }
func (x streamID) String() string       { return fmt.Sprintf("%d-%d", x.ms, x.seq) }

// claimScript claims a pending event for a retry if it is due. KEYS: the
// stream, the destination's retry hash. ARGV: group, consumer, now (ms),
// lease (ms), the event's id. An event in flight, or with no retry entry
// (its node died between XREADGROUP and recording its lease), is due once
// Redis has seen it idle for a lease; one whose mark is not its entry's
// value (a node that knows no mark rewrote the entry), at the entry's time. It answers {attempts, the entry's fields} having
// leased it to the consumer, or nil.
var claimScript = redis.NewScript(`
local now, lease, id = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local v = redis.call('HGET', KEYS[2], id)
-- In flight if marked with the entry's own value: a node of the version
-- before the mark rewrites the entry (its claim, its retry) and leaves
-- the mark, so a mark that differs is stale.
local mark = redis.call('HGET', KEYS[2], 'l:' .. id)
local leased = mark and mark == v
local n, at = 0, 0
if v then
  local a, b = string.match(v, '^(%d+) (%d+)$')
  n, at = tonumber(a) or 0, tonumber(b) or 0
end
if not v or leased then
  -- In flight (or its lease never recorded): due once Redis has seen it
  -- idle for a lease, on Redis's clock, whatever the nodes' clocks.
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[4], id, id, 1)
  if #p == 0 then return nil end
elseif at > now then
  return nil -- a retry, due at the time its node set
end
local r = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id)
if #r == 0 or not r[1] or not r[1][2] then
  redis.call('XACK', KEYS[1], ARGV[1], id)
  redis.call('HDEL', KEYS[2], id, 'l:' .. id)
  return nil
end
local e = n .. ' ' .. string.format('%d', now + lease)
redis.call('HSET', KEYS[2], id, e, 'l:' .. id, e)
return {n, r[1][2]}
`)
