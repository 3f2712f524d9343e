package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webpush"
)

// Web Push (contract Part 5) on Redis. A thread's subscriptions are one
// hash, <prefix>{T}:push, from each subscription's id to its JSON; a
// write reads it and writes it back in a MULTI under WATCH of it, of
// the thread's log (a thread must have a message) and of its meta (a
// thread marked unreadable is refused: unreadable.go), retried when
// another writer came between. The VAPID key is <prefix>vapid-key, offered with
// SET NX so that nodes started at once agree on one pair; a rotate SETs
// it. A push's claim is <prefix>push-claim:<id>, SET NX PX: the node that
// sets it sends the push, the others do not. Each claim is journaled
// until settled in <prefix>push-journal (journalKey), from which a node
// that starts takes what a killed node was still sending.

var _ store.Push = (*Store)(nil)

func (s *Store) pushKey(thread string) string { return s.prefix + "{" + thread + "}:push" }

var errBadPush = errors.New("not a push subscriptions record")

// readPush decodes the thread's subscriptions, oldest first. A field it
// does not know (a newer chatrelay's) makes the record unreadable, as on
// the file store, rather than be dropped by the next write of it.
func readPush(fields map[string]string) ([]chatrelay.PushSubscription, error) {
	out := make([]chatrelay.PushSubscription, 0, len(fields))
	for id, js := range fields {
		var p chatrelay.PushSubscription
		dec := json.NewDecoder(strings.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil || p.ID != id {
			return nil, fmt.Errorf("%w: subscription %q: %v", errBadPush, id, err)
		}
		if err := chatrelay.CheckPushSubscription(p); err != nil {
			return nil, fmt.Errorf("%w: subscription %q: %v", errBadPush, id, err)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, store.PushOrder)
	return out, nil
}

func (s *Store) pushErr(thread string, err error) error {
	var he *chatrelay.Error
	if errors.As(err, &he) {
		return err
	}
	if !errors.Is(err, errBadPush) {
		return s.unavailable("push", err)
	}
	s.log.Error("push subscriptions record does not parse; it is kept as it is", "thread", thread, "err", err)
	return store.PushUnreadable(err)
}

// withPush runs fn on the thread's subscriptions and writes what it
// returns (if write): set are the subscriptions to write, del the ids to
// remove.
func (s *Store) withPush(ctx context.Context, thread string, fn func(subs []chatrelay.PushSubscription) (set []chatrelay.PushSubscription, del []string, err error)) error {
	if err := chatrelay.CheckThread(thread); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key, log, meta := s.pushKey(thread), s.logKey(thread), s.metaKey(thread)
	for {
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			n, err := tx.XLen(ctx, log).Result()
			if err != nil {
				return err
			}
			if n == 0 {
				return chatrelay.Errorf(chatrelay.NotFound, "this thread has no message yet: post one before subscribing")
			}
			if mark, err := tx.HGet(ctx, meta, markField).Result(); err == nil {
				return markedUnreadable(thread, mark)
			} else if err != redis.Nil {
				return err
			}
			fields, err := tx.HGetAll(ctx, key).Result()
			if err != nil {
				return err
			}
			subs, err := readPush(fields)
			if err != nil {
				return err
			}
			set, del, err := fn(subs)
			if err != nil || (len(set) == 0 && len(del) == 0) {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for _, sub := range set {
					js, _ := json.Marshal(sub)
					p.HSet(ctx, key, sub.ID, js)
				}
				if len(del) > 0 {
					p.HDel(ctx, key, del...)
				}
				return nil
			})
			if err != nil {
				return err
			}
			return s.waitOn(ctx, tx) // on the Tx's connection, after its EXEC
		}, key, log, meta)
		if errors.Is(err, redis.TxFailedErr) {
			continue // another writer came between: read again
		}
		if err != nil {
			return s.pushErr(thread, err)
		}
		return nil
	}
}

// PushSubscribe implements store.Push.
func (s *Store) PushSubscribe(ctx context.Context, thread string, sub chatrelay.PushSubscription) (out chatrelay.PushSubscription, created bool, err error) {
	err = s.withPush(ctx, thread, func(subs []chatrelay.PushSubscription) ([]chatrelay.PushSubscription, []string, error) {
		_, got, c, write, err := chatrelay.AdmitPush(subs, sub)
		out, created = got, c
		if err != nil || !write {
			return nil, nil, err
		}
		return []chatrelay.PushSubscription{got}, nil, nil
	})
	return out, created, err
}

// PushSubscriptions implements store.Push.
func (s *Store) PushSubscriptions(ctx context.Context, thread string) ([]chatrelay.PushSubscription, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	fields, err := s.rdb.HGetAll(ctx, s.pushKey(thread)).Result()
	if err == nil {
		var subs []chatrelay.PushSubscription
		if subs, err = readPush(fields); err == nil {
			return subs, nil
		}
	}
	return nil, s.pushErr(thread, err)
}

// PushUnsubscribe implements store.Push.
func (s *Store) PushUnsubscribe(ctx context.Context, thread, id string) (out chatrelay.PushSubscription, err error) {
	err = s.withPush(ctx, thread, func(subs []chatrelay.PushSubscription) ([]chatrelay.PushSubscription, []string, error) {
		i := slices.IndexFunc(subs, func(p chatrelay.PushSubscription) bool { return p.ID == id })
		if i < 0 {
			return nil, nil, chatrelay.Errorf(chatrelay.NotFound, "no push subscription %q in this thread", id)
		}
		out = subs[i]
		return nil, []string{id}, nil
	})
	return out, err
}

// VAPIDKey implements store.Push: the key kept, or the one that won
// (keptKey).
func (s *Store) VAPIDKey(ctx context.Context) ([]byte, error) {
	key := s.prefix + "vapid-key"
	raw, err := s.keptKey(ctx, key, "vapid key", webpush.NewVAPIDKey)
	if err != nil {
		return nil, err
	}
	return store.CheckVAPID("redisstore: "+key, raw, nil)
}

// keptKey returns the value of key: the one kept; if there is none, SET
// NX of a fresh one (fresh), then GET, in one transaction, so that every
// node gets the value that won. what names it in a failure.
func (s *Store) keptKey(ctx context.Context, key, what string, fresh func() []byte) ([]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	raw, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		var get *redis.StringCmd
		if _, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SetNX(ctx, key, fresh(), 0)
			get = p.Get(ctx, key)
			return nil
		}); err == nil {
			raw, err = get.Bytes()
		}
	}
	if err != nil {
		return nil, s.unavailable(what, err)
	}
	return raw, nil
}

// RotateVAPIDKey implements store.Push.
func (s *Store) RotateVAPIDKey(ctx context.Context) ([]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	raw := webpush.NewVAPIDKey()
	if err := s.rdb.Set(ctx, s.prefix+"vapid-key", raw, 0).Err(); err != nil {
		return nil, s.unavailable("vapid key", err)
	}
	return raw, nil
}

// pushSettled is a settled push claim's value; a held one's is its
// owner's token.
const pushSettled = "settled"

func (s *Store) claimKey(id string) string { return s.prefix + "push-claim:" + id }

// journalKey is the push journal: a hash from each claim's id to the
// document it was claimed with, until it is settled. It is beside the
// claims (on shard 0 of a Sharded store, in its slot on a cluster), so
// that a claim and its entry are one script's keys.
func (s *Store) journalKey() string { return s.prefix + "push-journal" }

// pushClaimScript claims KEYS[1] for ARGV[1] for ARGV[2] ms if no one holds
// it, and then journals ARGV[4] (if not empty) under ARGV[3] in KEYS[2];
// it answers the value it found (nil: won).
var pushClaimScript = redis.NewScript(`
local was = redis.call('GET', KEYS[1])
if was then return was end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[2], ARGV[3], ARGV[4]) end
return false
`)

// ClaimPush implements store.Push: the claim is SET PX if no one holds
// it, and the document journaled with it, in one script (one round trip).
func (s *Store) ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	was, err := pushClaimScript.Run(ctx, s.rdb, []string{s.claimKey(id), s.journalKey()},
		owner, max(lease.Milliseconds(), 1), id, doc).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return true, false, nil
	case err != nil:
		return false, false, s.unavailable("push claim", err)
	}
	return false, was == pushSettled, nil
}

// RenewPush implements store.Push: PEXPIRE GT of each claim, so that a
// settled claim, which lasts longer, is left as it is.
func (s *Store) RenewPush(ctx context.Context, ids []string, lease time.Duration) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// No WAIT (replicas.go): a claim is a lease, renewed again.
	_, err := s.rdb.Pipelined(noWait(ctx), func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.Do(ctx, "PEXPIRE", s.claimKey(id), lease.Milliseconds(), "GT")
		}
		return nil
	})
	if err != nil {
		return s.unavailable("push claim renewal", err)
	}
	return nil
}

// SettlePush implements store.Push: the claim set settled and its
// journal entry removed, in one transaction.
func (s *Store) SettlePush(ctx context.Context, id string, keep time.Duration) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.claimKey(id), pushSettled, keep)
		p.HDel(ctx, s.journalKey(), id)
		return nil
	})
	if err != nil {
		return s.unavailable("push claim", err)
	}
	return nil
}

// JournaledPushes implements store.Push: the journal hash, every node's.
func (s *Store) JournaledPushes(ctx context.Context) ([]store.JournaledPush, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	all, err := s.rdb.HGetAll(ctx, s.journalKey()).Result()
	if err != nil {
		return nil, s.unavailable("push journal", err)
	}
	out := make([]store.JournaledPush, 0, len(all))
	for id, doc := range all {
		out = append(out, store.JournaledPush{ID: id, Doc: []byte(doc)})
	}
	return out, nil
}

// HandOverPushes implements store.Push: RPUSH to the handover list.
func (s *Store) HandOverPushes(ctx context.Context, docs [][]byte) error {
	if len(docs) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	vals := make([]any, len(docs))
	for i, d := range docs {
		vals[i] = d
	}
	if err := s.rdb.RPush(ctx, s.prefix+"push-handover", vals...).Err(); err != nil {
		return s.unavailable("push handover", err)
	}
	return nil
}

// TakePushes implements store.Push: the handover list, read and deleted
// in one transaction.
func (s *Store) TakePushes(ctx context.Context) ([][]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key := s.prefix + "push-handover"
	var all *redis.StringSliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.LRange(ctx, key, 0, -1)
		p.Del(ctx, key)
		return nil
	})
	if err != nil {
		return nil, s.unavailable("push handover", err)
	}
	docs := make([][]byte, 0, len(all.Val()))
	for _, d := range all.Val() {
		docs = append(docs, []byte(d))
	}
	return docs, nil
}

// dropPush removes the push subscriptions of a thread the sweep removed,
// unless it has a message again (a post came between): under WATCH of
// both keys, as every write of them.
func (s *Store) dropPush(ctx context.Context, thread string) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key, log := s.pushKey(thread), s.logKey(thread)
	err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		if n, err := tx.XLen(ctx, log).Result(); err != nil || n > 0 {
			return err
		}
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { return p.Del(ctx, key).Err() })
		return err
	}, key, log)
	if err != nil && !errors.Is(err, redis.TxFailedErr) {
		s.log.Warn("sweep: remove a removed thread's push subscriptions", "thread", thread, "err", err)
	}
}
