package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
)

// An unreadable thread. A stored message that does not decode (an entry
// of the log, or a v2 object, written by something else: a hand edit, a
// restore gone wrong) makes the thread unreadable, as a broken document
// makes it on the file store: every read answers ThreadUnreadable. So
// that every write does too, as on the file store (the contract: "it is
// never overwritten"), the reader that finds the entry marks the thread:
// meta's field "unreadable" (markField) names the entry. Every script
// that writes the thread reads the mark in the same step and refuses
// ("unreadable"), storing nothing; every read refuses a marked thread
// too (it may no longer reach the entry: a poll after it); the sweep
// keeps a marked thread as it is; Threads leaves it out.
//
// The mark is set by a read (Since, Changes, the feed's catch-up, a
// change's read of its message, Threads) that decodes the entry: a write
// to a thread damaged since it was last read whole is stored (finding
// the entry would take reading every message on every write). Only an
// operator clears the mark, after repairing the thread: docs/operations.md.
const markField = "unreadable"

// badEntry is the cause of a ThreadUnreadable error found by decoding:
// the entry that does not decode (its stream id, or where the reader
// found it).
type badEntry struct {
	thread, id string
	err        error
}

func (b *badEntry) Error() string {
	return fmt.Sprintf("redis thread %s entry %s: %v", b.thread, b.id, b.err)
}

func (b *badEntry) Unwrap() error { return b.err }

// unreadableEntry is the error of a stored message that does not decode
// (written by something else): the thread is unreadable, as a broken
// file is. The caller marks the thread (Store.noteUnreadable).
func unreadableEntry(thread, id string, err error) error {
	return &chatrelay.Error{Code: chatrelay.ThreadUnreadable,
		Message: "this thread's stored data does not parse; it is kept as it is for an operator to look at",
		Err:     &badEntry{thread: thread, id: id, err: err}}
}

// markedUnreadable is the error of a thread that carries the mark: mark
// is the field's value, the entry a reader found.
func markedUnreadable(thread, mark string) error {
	return &chatrelay.Error{Code: chatrelay.ThreadUnreadable,
		Message: "this thread's stored data does not parse; it is kept as it is for an operator to look at",
		Err:     fmt.Errorf("redis thread %s is marked unreadable (entry %s)", thread, mark)}
}

// markScript marks a thread unreadable if it still has a log (a thread
// removed meanwhile gets no meta). KEYS: the thread's log and meta. ARGV:
// the entry. It answers 1 if it set the mark, 0 if it was set already
// or the thread is gone.
var markScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HSETNX', KEYS[2], '` + markField + `', ARGV[1])
`)

// noteUnreadable marks the thread unreadable if err is the error of an
// entry that does not decode (unreadableEntry), and returns err. The mark
// is written even if ctx is done (the caller's answer is an error
// anyway); if Redis cannot be reached, the next read marks it.
func (s *Store) noteUnreadable(ctx context.Context, thread string, err error) error {
	var b *badEntry
	if !errors.As(err, &b) {
		return err
	}
	mctx, cancel := s.bound(context.WithoutCancel(ctx))
	defer cancel()
	set, merr := markScript.Run(mctx, s.rdb, []string{s.logKey(thread), s.metaKey(thread)}, b.id).Int64()
	switch {
	case merr != nil:
		s.log.Error("redis store: thread does not parse; marking it unreadable failed", "thread", thread, "entry", b.id, "err", merr)
	case set == 1:
		s.log.Error("redis store: thread does not parse; it is marked unreadable: its writes are refused until an operator repairs it",
			"thread", thread, "entry", b.id, "key", s.metaKey(thread), "field", markField, "err", b.err)
	}
	return err
}
