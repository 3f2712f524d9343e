package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webpush"
)

// Web Push (contract Part 5) in the file store. A thread's subscriptions
// are <data>/chat/<thread>.push.json (mode 0600), written under the
// thread's locks through the same atomic write as its document:
//
//	{"version":1,"thread":"a1b2c3d4e5f60718","subscriptions":[{…},…]}
//
// The VAPID key is <data>/vapid.key (0600): the raw P-256 scalar, made
// under the file's lock on first use (as the ticket key), replaced
// atomically by RotateVAPIDKey. One server serves a data folder, so a
// claim is this process's: kept in memory until its ttl, and journaled
// until settled (pushjournal.go).

var _ store.Push = (*File)(nil)

type pushFile struct {
	Version       int                          `json:"version"`
	Thread        string                       `json:"thread"`
	Subscriptions []chatrelay.PushSubscription `json:"subscriptions"`
}

func (s *File) pushPath(thread string) string { return filepath.Join(s.dir, thread+".push.json") }

// pushSnap is a thread's push subscriptions record as last parsed or
// written, with the checksum of its bytes: the pusher reads the record at
// every message hermes writes to the thread, and an unchanged one is
// parsed no more (its identity alone could deceive, as a document's can:
// see snapshot). Never modified.
type pushSnap struct {
	sum  uint64
	subs []chatrelay.PushSubscription
}

// readPush reads the thread's subscriptions (none if it has no record),
// a slice of the caller's own. A record that does not parse is an error
// (logged): nothing writes over it, and nothing is pushed from it.
func (s *File) readPush(thread string) ([]chatrelay.PushSubscription, error) {
	data, err := s.readFile(s.pushPath(thread))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, s.unavailable(thread, err)
	}
	t, sum := s.state(thread), maphash.Bytes(docSeed, data)
	if c := t.push.Load(); c != nil && c.sum == sum {
		return slices.Clone(c.subs), nil
	}
	subs, err := s.parsePush(thread, data)
	if err != nil {
		return nil, err
	}
	t.push.Store(&pushSnap{sum: sum, subs: slices.Clone(subs)})
	return subs, nil
}

// parsePush parses the bytes of thread's push subscriptions record.
func (s *File) parsePush(thread string, data []byte) ([]chatrelay.PushSubscription, error) {
	var f pushFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&f)
	if err == nil && (f.Version != 1 || f.Thread != thread) {
		err = fmt.Errorf("version %d of thread %q", f.Version, f.Thread)
	}
	for i := 0; err == nil && i < len(f.Subscriptions); i++ {
		if cerr := chatrelay.CheckPushSubscription(f.Subscriptions[i]); cerr != nil {
			err = fmt.Errorf("subscription %d: %v", i, cerr)
		}
	}
	if err != nil {
		s.log.Error("push subscriptions record does not parse; it is kept as it is", "thread", thread, "err", err)
		return nil, store.PushUnreadable(fmt.Errorf("push record of %s: %w", thread, err))
	}
	slices.SortFunc(f.Subscriptions, store.PushOrder) // the record keeps them in the order subscribed
	return f.Subscriptions, nil
}

// withPush runs fn on the thread's subscriptions under the thread's
// locks, and writes what it returns if write. A thread with no message
// is refused (NotFound) before any lock file is made.
func (s *File) withPush(ctx context.Context, thread string, fn func(subs []chatrelay.PushSubscription) ([]chatrelay.PushSubscription, bool, error)) error {
	if err := chatrelay.CheckThread(thread); err != nil {
		return err
	}
	noThread := chatrelay.Errorf(chatrelay.NotFound, "this thread has no message yet: post one before subscribing")
	if !s.mayExist(thread) {
		return noThread
	}
	t, snap, unlock, err := s.lockLoad(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	if snap == nil {
		t.drop = true
		return noThread
	}
	if snap.err != nil {
		return unreadable(snap)
	}
	if len(snap.doc.msgs) == 0 {
		return noThread
	}
	subs, err := s.readPush(thread)
	if err != nil {
		return err
	}
	out, write, err := fn(subs)
	if err != nil || !write {
		return err
	}
	if len(out) == 0 {
		if err := os.Remove(s.pushPath(thread)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s.unavailable(thread, err)
		}
		return nil
	}
	var prev []byte
	if len(subs) > 0 {
		prev = pushRecord(thread, subs)
	}
	slices.SortFunc(out, store.PushOrder) // as every read lists them
	b := pushRecord(thread, out)
	if err := s.replaceRecord(s.dir, thread+".push.json", b, prev, s.dsync); err != nil {
		return s.unavailable(thread, err)
	}
	s.state(thread).push.Store(&pushSnap{sum: maphash.Bytes(docSeed, b), subs: slices.Clone(out)}) // what the next read parses
	return nil
}

// pushRecord is the push subscriptions record of thread holding subs.
func pushRecord(thread string, subs []chatrelay.PushSubscription) []byte {
	b, _ := json.Marshal(pushFile{Version: 1, Thread: thread, Subscriptions: subs})
	return append(b, '\n')
}

// PushSubscribe implements store.Push.
func (s *File) PushSubscribe(ctx context.Context, thread string, sub chatrelay.PushSubscription) (out chatrelay.PushSubscription, created bool, err error) {
	err = s.withPush(ctx, thread, func(subs []chatrelay.PushSubscription) ([]chatrelay.PushSubscription, bool, error) {
		var write bool
		subs, out, created, write, err = chatrelay.AdmitPush(subs, sub)
		return subs, write, err
	})
	return out, created, err
}

// PushSubscriptions implements store.Push.
func (s *File) PushSubscriptions(ctx context.Context, thread string) ([]chatrelay.PushSubscription, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return nil, err
	}
	return s.readPush(thread)
}

// PushUnsubscribe implements store.Push.
func (s *File) PushUnsubscribe(ctx context.Context, thread, id string) (out chatrelay.PushSubscription, err error) {
	err = s.withPush(ctx, thread, func(subs []chatrelay.PushSubscription) ([]chatrelay.PushSubscription, bool, error) {
		i := slices.IndexFunc(subs, func(p chatrelay.PushSubscription) bool { return p.ID == id })
		if i < 0 {
			return nil, false, chatrelay.Errorf(chatrelay.NotFound, "no push subscription %q in this thread", id)
		}
		out = subs[i]
		return slices.Delete(slices.Clone(subs), i, i+1), true, nil
	})
	return out, err
}

func (s *File) vapidPath() string { return filepath.Join(filepath.Dir(s.dir), "vapid.key") }

// VAPIDKey implements store.Push.
func (s *File) VAPIDKey(ctx context.Context) ([]byte, error) {
	return keptFile(ctx, s.vapidPath(), "VAPID key", readVAPID, webpush.NewVAPIDKey, false, s.log)
}

// RotateVAPIDKey implements store.Push.
func (s *File) RotateVAPIDKey(ctx context.Context) ([]byte, error) {
	return keptFile(ctx, s.vapidPath(), "VAPID key", readVAPID, webpush.NewVAPIDKey, true, s.log)
}

func readVAPID(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return store.CheckVAPID("vapid key "+path, key, err)
}

// ClaimPush implements store.Push: one server serves a data folder, so
// the claims are kept in this process's memory, and journaled in
// DATA/push-journal.log (pushjournal.go).
func (s *File) ClaimPush(_ context.Context, id, _ string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	now := s.now()
	won, settled = s.claims.claim(id, now, lease)
	if won && doc != nil {
		s.journal.add(id, doc, now)
	}
	return won, settled, nil
}

// RenewPush implements store.Push.
func (s *File) RenewPush(_ context.Context, ids []string, lease time.Duration) error {
	s.claims.renew(ids, s.now(), lease)
	return nil
}

// SettlePush implements store.Push.
func (s *File) SettlePush(_ context.Context, id string, keep time.Duration) error {
	now := s.now()
	s.claims.settle(id, now, keep)
	s.journal.remove(id, now)
	return nil
}

// JournaledPushes implements store.Push: at the server's start, what the
// process before it left unsettled (it was killed); later, with this
// process's own.
func (s *File) JournaledPushes(context.Context) ([]store.JournaledPush, error) {
	return s.journal.entries(s.now()), nil
}

// handoverPath is the file of the pushes a stopping server handed over.
func (s *File) handoverPath() string {
	return filepath.Join(filepath.Dir(s.dir), "push-handover.json")
}

// HandOverPushes implements store.Push: the documents, with any not yet
// taken, in one JSON array written whole (0600, fsynced, renamed over
// the last), under the file's lock.
func (s *File) HandOverPushes(ctx context.Context, docs [][]byte) error {
	if len(docs) == 0 {
		return nil
	}
	path := s.handoverPath()
	unlock, err := lockPath(ctx, path+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer unlock()
	all, err := readHandover(path)
	if err != nil {
		return err
	}
	for _, d := range docs {
		all = append(all, json.RawMessage(d))
	}
	data, err := json.Marshal(all)
	if err != nil {
		return fmt.Errorf("push handover: %w", err)
	}
	f, _, err := writeFile(filepath.Dir(path), filepath.Base(path), data, true)
	if err != nil {
		return fmt.Errorf("push handover: %w", err)
	}
	return f.Close()
}

// TakePushes implements store.Push: the file's documents; the file is
// removed.
func (s *File) TakePushes(ctx context.Context) ([][]byte, error) {
	path := s.handoverPath()
	unlock, err := lockPath(ctx, path+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := readHandover(path)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("push handover: %w", err)
	}
	docs := make([][]byte, len(all))
	for i, d := range all {
		docs[i] = d
	}
	return docs, nil
}

// readHandover reads the handover file: none is an empty list; one that
// does not parse is an error naming it (left as it is).
func readHandover(path string) ([]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("push handover: %w", err)
	}
	var all []json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, fmt.Errorf("push handover %s does not parse: %w", path, err)
	}
	return all, nil
}

// pushClaims are the claims of this process, each until its end; the
// ended ones are dropped as new ones come. Safe for concurrent use.
type pushClaims struct {
	mu     sync.Mutex
	claims map[string]pushClaim
	sweep  time.Time // when ended claims were last dropped
}

type pushClaim struct {
	until   time.Time
	settled bool
}

func (c *pushClaims) claim(id string, now time.Time, lease time.Duration) (won, settled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = make(map[string]pushClaim)
	}
	if now.Sub(c.sweep) > time.Minute {
		maps.DeleteFunc(c.claims, func(_ string, p pushClaim) bool { return !p.until.After(now) })
		c.sweep = now
	}
	if p, ok := c.claims[id]; ok && p.until.After(now) {
		return false, p.settled
	}
	c.claims[id] = pushClaim{until: now.Add(lease)}
	return true, false
}

func (c *pushClaims) renew(ids []string, now time.Time, lease time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if p, ok := c.claims[id]; ok && p.until.After(now) && p.until.Before(now.Add(lease)) {
			p.until = now.Add(lease)
			c.claims[id] = p
		}
	}
}

func (c *pushClaims) settle(id string, now time.Time, keep time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = make(map[string]pushClaim)
	}
	c.claims[id] = pushClaim{until: now.Add(keep), settled: true}
}
