package filestore

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Writes: every change of a thread document runs through mutate, under
// the thread's locks, and is written atomically (write, in atomic.go).

// Append implements Store.
func (s *File) Append(ctx context.Context, thread string, m store.NewMessage) (_ store.Entry, err error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return store.Entry{}, err
	}
	ix, err := m.Prepare(s.now())
	if err != nil {
		return store.Entry{}, err
	}
	var e store.Entry
	var gone map[string]bool // the attachments of the messages retention dropped
	defer func() {
		if len(gone) > 0 && err == nil {
			if cerr := s.collectLocked(ctx, thread, gone); cerr != nil {
				s.log.Warn("append: collect attachments", "thread", thread, "err", cerr)
			}
		}
	}()
	err = s.mutate(ctx, thread, !m.MustExist && m.Participant == "", func(d threadDoc, now time.Time) (threadDoc, func(), error) {
		var grants []chatrelay.Grant
		gi := -1
		if m.Participant != "" {
			var err error
			if grants, err = s.readGrants(thread); err != nil {
				return d, nil, err
			}
			if gi, err = checkParticipantPost(grants, d, m, now); err != nil {
				return d, nil, err
			}
		}
		as, err := s.attachTo(thread, d, m.Attachments, m.Participant, now)
		if err != nil && !(m.ClientID != "" && slices.ContainsFunc(d.msgs, func(e store.Entry) bool { return e.ClientID == m.ClientID })) {
			return d, nil, err // (a repeat's attachments are its own, used: appendTo answers it)
		}
		nd, ne, err := appendTo(d, m, ix, as, s.opt.Retention, now)
		e = ne
		if err == nil && !ne.Replayed {
			gone = droppedFiles(d.msgs, nd.msgs)
		}
		if err != nil || ne.Replayed || gi < 0 {
			return nd, nil, err
		}
		// Count the post in the grant first: a crash between the two
		// writes counts one post too many, never one too few. A post
		// whose document the store then fails to write is counted back
		// (it is refused: it counts nothing). Counting back needs no more
		// room on the disk than counting did, which just succeeded, with
		// the room the failed write had taken given back.
		counted := slices.Clone(grants)
		counted[gi].Sent++
		if err := s.writeGrants(thread, grants, counted); err != nil {
			return d, nil, err // nothing stored
		}
		return nd, func() {
			if err := s.writeGrants(thread, counted, grants); err != nil {
				s.log.Warn("a post the store refused stays counted in its share link's sent", "thread", thread, "participant", m.Participant, "err", err)
			}
		}, nil
	})
	return e, err
}

// Change implements Store.
func (s *File) Change(ctx context.Context, thread string, c store.Change) (store.Entry, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return store.Entry{}, err
	}
	var e store.Entry
	err := s.mutate(ctx, thread, false, func(d threadDoc, now time.Time) (threadDoc, func(), error) {
		nd, ne, _, err := changeIn(d, c, now)
		e = ne
		return nd, nil, err
	})
	return e, err
}

// Pending implements Store.
func (s *File) Pending(ctx context.Context) ([]store.PendingInteraction, error) {
	names, err := s.threadNames()
	if err != nil {
		return nil, s.unavailable("", err)
	}
	var out []store.PendingInteraction
	for _, name := range names {
		d, ok, err := s.read(name)
		if err != nil || !ok {
			continue // removed meanwhile, or unreadable (logged by load)
		}
		for _, e := range d.msgs {
			if ix := e.Interaction; ix != nil && ix.State == chatrelay.Pending {
				out = append(out, store.PendingInteraction{Thread: name, InteractionID: ix.ID, Deadline: ix.Deadline})
			}
		}
	}
	return out, nil
}

// mutate runs fn on the thread's current document under the thread's
// locks and, if fn returns a new document (another slice of messages or
// other marks), writes it and hands its changes to the feed. fn may return
// a new document together with an error (the change is stored, and the
// error returned), and an undo, which is run (under the locks) if the new
// document cannot be written: what fn wrote beside the document for it
// is taken back. create allows fn to run on a thread that has no
// document (fn then gets an empty one); otherwise such a thread is
// NotFound.
func (s *File) mutate(ctx context.Context, thread string, create bool, fn mutation) error {
	for {
		retry, err := s.mutateOnce(ctx, thread, create, fn)
		if !retry {
			return err
		}
	}
}

// mutation is what mutate runs: the new document, what to undo if it
// cannot be written (nil: nothing), and an error.
type mutation func(d threadDoc, now time.Time) (nd threadDoc, undo func(), err error)

// mutateOnce is one attempt of mutate. A thread that has no document
// first reserves its place in the thread count under the store-wide lock
// (taken before the thread's lock: the one lock order), so that no lock
// file is made for a thread the limit refuses; the store-wide lock is held
// only for that, never across the document's write and fsyncs, so
// creations do not queue behind each other's disk writes. A reservation
// that creates nothing (another process created the thread meanwhile,
// or the write failed) is given back once the thread's lock is released.
// If the document vanished (swept) after the lock-free check, it asks to
// retry. While a call of this process creates a thread, another that
// would create it too reserves nothing and waits for the thread's lock
// (reserveThread): it then finds the document, or, if the creation
// failed, tries again.
func (s *File) mutateOnce(ctx context.Context, thread string, create bool, fn mutation) (retry bool, err error) {
	notFound := func() error { return chatrelay.Errorf(chatrelay.NotFound, "no thread %s", thread) }
	creating := !s.mayExist(thread)
	c := creation{s: s, thread: thread}
	if creating {
		if !create {
			return false, notFound()
		}
		if creating, c.counted, err = s.reserveThread(ctx, thread, false); err != nil {
			return false, err
		}
	}
	if creating {
		defer c.finish(ctx) // after the thread's lock is released (deferred below)
	}
	// The replaced document's pin is closed last, once the thread's lock
	// is let go of and the change announced: closing the last descriptor
	// of a replaced file frees it (on ext4, its blocks, in the journal),
	// which neither the thread's next writer nor the subscribers need to
	// wait for.
	var replaced *fdPin
	defer func() {
		if replaced != nil {
			replaced.Close()
		}
	}()
	// Now that no other process writes; hasLog unless the load says otherwise.
	hasLog := true
	t, snap, unlock, err := s.lockLoadLogged(ctx, thread, &hasLog)
	if err != nil {
		return false, err
	}
	defer unlock()
	if creating {
		// Before the lock is let go of: a waiter then finds the
		// document, or may create the thread itself.
		defer c.end()
	}
	if snap == nil {
		// No document: unless this call writes one, its lock file goes
		// (before the deferred unlock, which removes it).
		defer func() { t.drop = !c.created }()
	}
	if snap == nil && !creating {
		if !create {
			return false, notFound()
		}
		return true, nil // swept after the check: decide creating again
	}
	var old threadDoc
	if snap != nil {
		if snap.err != nil {
			return false, unreadable(snap)
		}
		old = snap.doc
	} else if old.rev, err = s.readFloor(thread); err != nil { // floor.go
		return false, err
	}
	nd, undo, ferr := fn(old, s.now())
	if sameDoc(nd, old) {
		return false, ferr
	}
	if replaced, err = s.commit(t, thread, snap, old, nd, hasLog); err != nil {
		if undo != nil {
			undo() // what fn wrote beside the document for it
		}
		return false, err
	}
	c.created = snap == nil
	s.announce(thread, t, nd)
	return false, ferr
}

// commit writes the change from old, the document of snap (nil: the
// thread has none), to nd, under the thread's lock: the change's webhook
// events first, then one line in the thread's log if the change is a new
// message the log takes (logLine), else the whole document anew
// (writeDoc). It makes the new state the thread's snapshot and returns the
// replaced one's pin, for the caller to close once it lets go of the
// lock. hasLog says the load found a log (or could not tell).
func (s *File) commit(t *threadState, thread string, snap *snapshot, old, nd threadDoc, hasLog bool) (replaced *fdPin, err error) {
	if err := s.queueEvents(thread, old, nd, nd.rev); err != nil {
		return nil, err
	}
	if line, ok := s.logLine(snap, old, nd); ok {
		return s.commitLine(t, thread, snap, nd, line)
	}
	return s.commitDoc(t, thread, snap, old, nd, hasLog)
}

// commitLine appends line, nd's new message, to the thread's log (log.go)
// and makes nd, snap's document with it, the thread's snapshot.
func (s *File) commitLine(t *threadState, thread string, snap *snapshot, nd threadDoc, line []byte) (replaced *fdPin, err error) {
	ls, err := s.appendLog(t, thread, snap.log, line)
	s.noteWrite(len(line), err)
	if err != nil {
		return nil, s.unavailable(thread, err)
	}
	next := *snap
	next.doc, next.log = nd, ls
	return s.takeOverSnap(t, &next), nil
}

// commitDoc writes nd as the thread's document (atomic replace; snap nil:
// the thread's first, see write) and makes it the thread's snapshot; the
// log's lines are in it now, so the log is emptied.
func (s *File) commitDoc(t *threadState, thread string, snap *snapshot, old, nd threadDoc, hasLog bool) (replaced *fdPin, err error) {
	if snap == nil && hasLog {
		// A log without its document (removed by hand) must not add
		// its lines to the new thread. (The load under the lock looked
		// for it: a creation, as a rule, finds none and removes nothing.)
		syscall.Unlink(s.logPath(thread))
	}
	ver := 0
	if s.opt.AppendLog && isAppend(old, nd) {
		ver = logVersion // the thread's next message may go to its log
	}
	pin, id, err := s.writeDoc(thread, nd, ver, snap == nil)
	if err != nil {
		if snap != nil {
			s.restoreDoc(thread, snap, err)
		}
		return nil, err
	}
	var ls logState
	if snap != nil {
		ls = s.emptyLog(thread, snap.log) // its lines are in the document now
	}
	return s.swapSnap(t, &snapshot{id: id, pin: pin, doc: nd, base: nd, ver: ver, log: ls, written: true}), nil // its sum only if needed (sumOf)
}

// restoreDoc puts snap's document back after a write of the thread's
// document that failed with err. A folder fsync that failed after the new
// document got its name (unsyncedError) left it in place: readers would
// see the change the store refused (503), and a v1 client, which has no
// client_id to retry with, would post it twice. The caller holds the
// thread's locks, so no feed of this process has announced the change.
func (s *File) restoreDoc(thread string, snap *snapshot, err error) {
	var unsynced *unsyncedError
	if !errors.As(err, &unsynced) {
		return // nothing was renamed: the document is the old one
	}
	pin, _, rerr := s.writeDoc(thread, snap.base, snap.ver, false)
	if pin != nil {
		pin.Close()
	}
	if rerr != nil && !errors.As(rerr, &unsynced) {
		s.log.Error("a refused change stays in its thread's document: the document before it could not be written back", "thread", thread, "err", rerr)
	}
}

// isAppend reports whether nd is old with a new message: its newest
// message is its newest change, newer than old's.
func isAppend(old, nd threadDoc) bool {
	if len(nd.msgs) == 0 {
		return false
	}
	last := nd.msgs[len(nd.msgs)-1]
	return last.Epoch == nd.rev && last.Rev == last.Epoch && nd.rev > old.rev
}

// logLine returns the line the change from old to nd, the document of
// snap and the next one, writes to the thread's log, if the store appends
// to logs (AppendLog), the change is a new message and nothing else (no
// retention drop, no other mark or message changed), snap's document is
// version 5 (older binaries refuse it) and the log has room; else ok is
// false and the document is written anew.
func (s *File) logLine(snap *snapshot, old, nd threadDoc) (line []byte, ok bool) {
	if !s.opt.AppendLog || snap == nil || snap.err != nil || snap.ver < logVersion || len(nd.msgs) != len(old.msgs)+1 || !isAppend(old, nd) ||
		nd.trimmed != old.trimmed || nd.trimmedRev != old.trimmedRev || nd.title != old.title {
		return nil, false
	}
	if len(old.msgs) > 0 && &nd.msgs[0] != &old.msgs[0] {
		for i := range old.msgs {
			if &nd.msgs[i].JSON2[0] != &old.msgs[i].JSON2[0] {
				return nil, false
			}
		}
	}
	line = nd.msgs[len(nd.msgs)-1].JSON2
	if len(line) == 0 || bytes.IndexByte(line, '\n') >= 0 || snap.log.full(line, snap.id.size) {
		return nil, false
	}
	return line, true
}

// queueEvents queues the webhook events of the change from old to nd at
// epoch ms at (outbox.go), if the store has destinations.
func (s *File) queueEvents(thread string, old, nd threadDoc, at int64) error {
	if s.hooks == nil {
		return nil
	}
	if lines := eventsOf(thread, old, nd, at); len(lines) > 0 {
		if err := s.hooks.queue(lines); err != nil {
			return s.unavailable(thread, err)
		}
	}
	return nil
}

// writeDoc writes thread's document nd (atomic replace; create: the
// thread has none, see write) at version ver or its content's if that is
// more, noting a failed write for the readiness probe.
func (s *File) writeDoc(thread string, nd threadDoc, ver int, create bool) (*fdPin, fileID, error) {
	bp := docBufs.Get().(*[]byte)
	doc := appendDocumentV((*bp)[:0], thread, nd, ver)
	pin, id, err := s.write(thread, doc, create)
	s.noteWrite(len(doc), err)
	*bp = doc[:0]
	docBufs.Put(bp)
	return pin, id, err
}

// noteWrite notes a write of size bytes that failed (err) for the
// readiness probe, or that one succeeded.
func (s *File) noteWrite(size int, err error) {
	if err != nil {
		s.lastFail.Store(&writeFailure{size: size, err: err})
	} else if s.lastFail.Load() != nil {
		s.lastFail.Store(nil)
	}
}

// sameDoc reports whether fn left the document as it was.
func sameDoc(a, b threadDoc) bool {
	return a.rev == b.rev && a.title == b.title && a.trimmed == b.trimmed && a.trimmedRev == b.trimmedRev && len(a.msgs) == len(b.msgs) &&
		(len(a.msgs) == 0 || &a.msgs[0] == &b.msgs[0])
}

// write replaces the thread's document atomically (writeFD); create says
// the caller, holding the thread's lock, found no document: it is then
// created by createFD where the system can, and a creation whose folder
// fsync fails after the document got its name removes it again. It
// returns the new file, still open (the snapshot's pin), and its identity.
func (s *File) write(thread string, doc []byte, create bool) (*fdPin, fileID, error) {
	fd := -1
	var id fileID
	err := s.withFDs(func() (err error) {
		if create && !s.noTmpfile.Load() {
			var how createHow
			switch fd, id, how, err = createFD(s.dir, thread+".json", doc, s.dsync); how {
			case created:
				return err
			case noTmpfile:
				s.noTmpfile.Store(true) // the folder's file system has none: not again
			}
		}
		tmp, tmpFD := s.tempDir()
		fd, _, id, err = writeFD(tmp, tmpFD, s.dir, thread+".json", doc, s.dsync)
		var unsynced *unsyncedError
		if err != nil && tmp == s.tmpDir && !errors.As(err, &unsynced) {
			// The temp folder failed it (removed, or replaced by a file,
			// or made unwritable, by hand; or the disk is full): the
			// write is made again beside the documents, where the
			// readiness probe writes, and the next write looks at the
			// folder again (made again if it is gone).
			s.tmpState.CompareAndSwap(tmpReady, tmpUnknown)
			fd, _, id, err = writeFD(s.dir, -1, s.dir, thread+".json", doc, s.dsync)
		}
		return err
	})
	if err != nil {
		var unsynced *unsyncedError
		if create && errors.As(err, &unsynced) {
			// The document has its name, but the refused creation must
			// leave none: its caller gives back the thread's place in
			// the count and drops its lock file.
			if uerr := syscall.Unlink(s.path(thread)); uerr != nil && uerr != syscall.ENOENT {
				s.log.Warn("a refused creation left its document; the thread count stays one too low until the next sweep", "thread", thread, "err", uerr)
			}
		}
		return nil, id, s.unavailable(thread, err)
	}
	return &fdPin{fd}, id, nil
}

// droppedFiles lists the attachments of the messages of old (oldest
// first) that are not in kept (retention dropped them: their attachments
// go with them); nil if none.
func droppedFiles(old, kept []store.Entry) map[string]bool {
	var gone map[string]bool
	for _, e := range old {
		if len(kept) > 0 && e.Epoch >= kept[0].Epoch {
			break
		}
		for _, a := range e.Attachments {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[a.ID] = true
		}
	}
	return gone
}
