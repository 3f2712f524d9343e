package filestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Reads take no lock: a rename makes every read see a whole old or a
// whole new document (load, in cache.go).

func (s *File) unavailable(thread string, err error) error {
	s.log.Error("store", "thread", thread, "err", err)
	return &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store cannot be reached", Retry: time.Second, Err: err}
}

func unreadable(snap *snapshot) error {
	return &chatrelay.Error{Code: chatrelay.ThreadUnreadable, Message: "this thread's stored file does not parse; it is kept as it is for an operator to look at", Err: snap.err}
}

// Since implements Store.
func (s *File) Since(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	d, ok, err := s.read(thread)
	if err != nil || !ok {
		return store.Page{Thread: thread}, err
	}
	return page(thread, d, since, limit), nil
}

// Changes implements Store.
func (s *File) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	d, ok, err := s.read(thread)
	if err != nil || !ok {
		return store.Page{Thread: thread}, err
	}
	return changesPage(thread, d, since, limit), nil
}

// read returns the thread's current document; ok is false for a thread
// with no document (reading it creates nothing).
func (s *File) read(thread string) (threadDoc, bool, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return threadDoc{}, false, err
	}
	t := s.peek(thread)
	if t == nil {
		// Only threads that exist get state: reading random threads must not grow memory.
		if _, err := os.Stat(s.path(thread)); errors.Is(err, fs.ErrNotExist) {
			return threadDoc{}, false, nil
		}
		t = s.state(thread)
	}
	snap, err := s.load(thread, t)
	if err != nil || snap == nil {
		return threadDoc{}, false, err
	}
	if snap.err != nil {
		return threadDoc{}, false, unreadable(snap)
	}
	return snap.doc, true, nil
}

// mayExist reports whether the thread has a document, as far as a check
// without its lock can tell: a thread this process has read or written
// exists but for a sweep since, which a load under the lock notices.
func (s *File) mayExist(thread string) bool {
	if t := s.peek(thread); t != nil && t.snap.Load() != nil {
		return true
	}
	_, err := os.Stat(s.path(thread))
	return !errors.Is(err, fs.ErrNotExist)
}

// Threads implements Store.
func (s *File) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	infos, _, err := s.threads(false)
	return infos, err
}

var _ store.ThreadsReporter = (*File)(nil)

// ThreadsReport implements store.ThreadsReporter: a document that cannot
// be opened or read (its mode, a folder in place of its log, a failing
// disk) is named, and the other threads listed.
func (s *File) ThreadsReport(ctx context.Context) ([]store.ThreadInfo, []store.ThreadError, error) {
	return s.threads(true)
}

// threads lists the threads; with report, a thread it cannot read is
// named in bad, not a failure of the whole list.
func (s *File) threads(report bool) (infos []store.ThreadInfo, bad []store.ThreadError, err error) {
	names, err := s.threadNames()
	if err != nil {
		return nil, nil, s.unavailable("", err)
	}
	infos = make([]store.ThreadInfo, 0, len(names))
	for _, name := range names {
		snap, err := s.load(name, s.state(name))
		switch {
		case err != nil && !report:
			return nil, nil, err
		case err != nil:
			bad = append(bad, store.ThreadError{Thread: name, Err: err})
			continue
		case snap == nil:
			continue // removed meanwhile
		case snap.err != nil:
			if report { // logged by load
				bad = append(bad, store.ThreadError{Thread: name, Err: unreadable(snap)})
			}
			continue
		case len(snap.doc.msgs) == 0:
			continue
		}
		infos = append(infos, threadInfo(name, snap.doc))
	}
	slices.SortFunc(infos, store.ThreadOrder) // newest activity first
	return infos, bad, nil
}
