package filestore

import (
	"context"
	"errors"
	"hash/maphash"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Sweep implements Store. It also removes temp files that a writer killed
// mid-write left behind (under that thread's lock, so never a live one).
func (s *File) Sweep(ctx context.Context) (store.SweepStats, error) {
	var st store.SweepStats
	names, err := s.threadNames()
	if err != nil {
		return st, s.unavailable("", err)
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		dropped, removed, err := s.sweepThread(ctx, name)
		if err != nil {
			s.log.Warn("sweep", "thread", name, "err", err)
			continue
		}
		st.Threads++
		st.Dropped += dropped
		if removed {
			st.ThreadsRemoved++
		}
	}
	// A writer killed while creating a thread leaves a temp file or its
	// lock file and no document: clean those up too, under the thread's
	// lock like the rest.
	for _, name := range s.orphanTemps(names) {
		if _, _, err := s.sweepThread(ctx, name); err != nil {
			s.log.Warn("sweep", "thread", name, "err", err)
		}
	}
	s.sweepUploads(ctx) // attachments.go: every thread's uploads, and removed threads' files
	s.sweepFloors(ctx)  // floor.go
	if err := s.recount(ctx); err != nil {
		s.log.Warn("sweep: recount the threads", "err", err)
	}
	return st, nil
}

// orphanLockAge is the age past which a thread's lock file with no
// document is a writer's that was killed while it created the thread.
const orphanLockAge = time.Hour

// threadRecords are the name suffixes of a thread's records beside its
// document: they go with it (removeThread).
var threadRecords = []string{".participants.json", ".audit.jsonl", ".push.json"}

// orphanSuffixes end the names of a thread's files that orphanOf reads
// as the thread's, after its temp and lock files: its log and records.
var orphanSuffixes = append([]string{".log"}, threadRecords...)

// orphanTemps lists the threads, other than those in docs, that have temp
// files, a log, a lock file an hour old or records (and no document), in
// one read of the folder (and one of the temp folder): a lock file is
// statted only when its thread has no document (every thread keeps one).
func (s *File) orphanTemps(docs []string) []string {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil // the sweep's next run reads it again
	}
	if tmps, err := s.readTempFolder(); err == nil {
		des = append(des, tmps...) // temp files only: orphanOf reads no lock or record there
	}
	seen := make(map[string]bool, len(docs))
	for _, name := range docs {
		seen[name] = true
	}
	var out []string
	for _, de := range des {
		name, lock := orphanOf(de.Name())
		if name == "" || seen[name] || !chatrelay.ValidThread(name) {
			continue
		}
		if lock {
			// A killed creator's once an hour old (a live one holds it
			// for a moment: the sweep does not wait for it).
			fi, err := de.Info()
			if err != nil || s.now().Sub(fi.ModTime()) <= orphanLockAge {
				continue
			}
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

// orphanOf is the thread a file of the chat folder other than its
// document belongs to ("" for none): a temp file (".<thread>.json.tmp-…"),
// its log, its lock file (lock true) or one of its records (threadRecords:
// a removal cut short leaves them).
func orphanOf(file string) (thread string, lock bool) {
	if rest, ok := strings.CutPrefix(file, "."); ok {
		thread, _, ok = strings.Cut(rest, ".json.tmp-")
		if ok {
			return thread, false
		}
		return "", false
	}
	if thread, ok := strings.CutSuffix(file, ".json.lock"); ok {
		return thread, true
	}
	for _, suffix := range orphanSuffixes {
		if thread, ok := strings.CutSuffix(file, suffix); ok {
			return thread, false
		}
	}
	return "", false
}

// sweepThread sweeps one thread under its lock: it removes the temp
// files a killed writer left, drops the messages past retention (their
// attachments with them) and writes the document that keeps the rest, or
// removes the thread if none is left.
func (s *File) sweepThread(ctx context.Context, thread string) (dropped int, removed bool, err error) {
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	s.removeTemps(thread)
	snap, err := s.load(thread, t)
	if err != nil {
		return 0, false, err
	}
	if snap == nil {
		// A thread with no document (temp files of a writer killed while
		// creating it, a log whose document was removed by hand, or the
		// records of a removal cut short): nothing of it stays.
		os.Remove(s.logPath(thread))
		s.removeRecords(thread)
		t.drop = true
		return 0, false, nil
	}
	if snap.err != nil {
		return 0, false, unreadable(snap)
	}
	d := snap.doc
	now := s.now()
	msgs, trimmed, trimmedRev := trim(s.opt.Retention, d.msgs, now, d.trimmed, d.trimmedRev)
	dropped = len(d.msgs) - len(msgs)
	if dropped == 0 {
		return 0, false, nil
	}
	if len(msgs) == 0 {
		// Removed below: its newest change kept first (floor.go).
		if err := s.keepFloor(thread, newestChange(d), now); err != nil {
			return 0, false, s.unavailable(thread, err)
		}
	}
	if gone := droppedFiles(d.msgs, msgs); gone != nil {
		// The messages' attachments go with them (after the document is
		// written: collected when this returns, under the same lock).
		defer func() {
			if err != nil {
				return
			}
			var nd *threadDoc
			if !removed {
				if snap := t.snap.Load(); snap != nil {
					nd = &snap.doc
				}
			}
			if cerr := s.collect(thread, nd, gone); cerr != nil {
				s.log.Warn("sweep: attachments", "thread", thread, "err", cerr)
			}
		}()
	}
	nd := threadDoc{msgs: msgs, trimmed: trimmed, trimmedRev: trimmedRev, rev: d.rev, title: d.title}
	if err := s.queueEvents(thread, d, nd, now.UnixMilli()); err != nil { // the interactions dropped pending
		return 0, false, err
	}
	if len(msgs) == 0 {
		if err := s.queueRemovedGrants(thread, now); err != nil {
			return 0, false, err
		}
		if err := s.removeThread(t, thread); err != nil {
			return 0, false, err
		}
		return dropped, true, nil
	}
	if err := s.writeTrimmed(t, thread, snap, nd); err != nil {
		return 0, false, err
	}
	s.announce(thread, t, nd) // the interactions it dropped pending (Batch.Closed)
	return dropped, false, nil
}

// newestChange is the newest epoch of d: its newest change, or a
// message's epoch or rev, or one retention dropped, if newer.
func newestChange(d threadDoc) int64 {
	n := max(d.rev, d.trimmed, d.trimmedRev)
	for _, e := range d.msgs {
		n = max(n, e.Epoch, e.Rev)
	}
	return n
}

// removeTemps removes the thread's temp files (of its document, its
// participants record, its audit trail and its push subscriptions) that a
// writer killed mid-write left behind, in the chat folder (a binary older
// than the temp folder wrote its document's there) and in the temp
// folder; the caller holds the thread's lock, so none is a live writer's.
func (s *File) removeTemps(thread string) {
	if tmps, err := s.readTempFolder(); err == nil {
		removeTempsOf(s.tmpDir, tmps, thread)
	}
	if des, err := os.ReadDir(s.dir); err == nil { // once, not once a pattern
		removeTempsOf(s.dir, des, thread)
	}
}

// readTempFolder lists the temp folder, if it is a folder of its own (not
// a link to another one, whose files are not the store's).
func (s *File) readTempFolder() ([]os.DirEntry, error) {
	if fi, err := os.Lstat(s.tmpDir); err != nil || !fi.IsDir() {
		return nil, fs.ErrNotExist
	}
	return os.ReadDir(s.tmpDir)
}

// removeTempsOf removes thread's temp files among des, the entries of
// the folder dir.
func removeTempsOf(dir string, des []os.DirEntry, thread string) {
	prefix := "." + thread
	for _, de := range des {
		rest, ok := strings.CutPrefix(de.Name(), prefix)
		if !ok {
			continue
		}
		for _, pattern := range []string{".json.tmp-", ".participants.json.tmp-", ".audit.jsonl.tmp-", ".push.json.tmp-", ".floor.tmp-"} {
			if strings.HasPrefix(rest, pattern) {
				os.Remove(filepath.Join(dir, de.Name()))
				break
			}
		}
	}
}

// queueRemovedGrants queues the participant.revoked events of the links
// of thread still active as the sweep removes it at now, if the store has
// destinations (before the removal: the deliverer confirms an event of a
// thread that has no document). A participants record that does not read
// has none to say.
func (s *File) queueRemovedGrants(thread string, now time.Time) error {
	if s.hooks == nil {
		return nil
	}
	grants, err := s.readGrants(thread)
	if err != nil {
		s.log.Warn("sweep: no participant.revoked for the links of a removed thread", "thread", thread, "err", err)
		return nil
	}
	if lines := removedGrantsOf(thread, grants, now); len(lines) > 0 {
		if err := s.hooks.queue(lines); err != nil {
			return s.unavailable(thread, err)
		}
	}
	return nil
}

// removeThread removes a thread whose messages retention has all dropped,
// under its lock: its log, its document, then its grants, audit, push
// subscriptions, uploads (those no post named yet too, as on Redis: the
// thread made again with the same token must not find them) and lock file.
func (s *File) removeThread(t *threadState, thread string) error {
	// Its grants, audit and push subscriptions first: a crash before the
	// document is gone leaves a thread the next sweep removes, never
	// records that a thread made again with the same token would find
	// (its old share links working again). One left all the same (a
	// removal that failed) goes at the next sweep (orphanTemps).
	s.removeRecords(thread)
	// Then the log: its messages are the newest, so a crash between the
	// two removals leaves the older ones, which the next sweep drops,
	// never newer messages than the document's.
	if err := os.Remove(s.logPath(thread)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.unavailable(thread, err)
	}
	if err := os.Remove(s.path(thread)); err != nil {
		return s.unavailable(thread, err)
	}
	// The thread is gone: its uploads and lock file go with it.
	s.removeStray(thread, nil) // every upload and its bytes
	s.announceClosed(thread, s.dropped(t, nil, nil))
	s.announceParticipants(thread)
	if s.dsync != nil {
		s.dsync.sync()
	}
	s.setSnap(t, nil)
	t.drop = true // and its lock file
	return nil
}

// removeRecords removes thread's grants, audit and push subscriptions, for
// a caller holding its lock.
func (s *File) removeRecords(thread string) {
	for _, p := range []string{s.participantsPath(thread), s.auditPath(thread), s.pushPath(thread)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("sweep: remove", "thread", thread, "err", err)
		}
	}
}

// writeTrimmed writes nd, the document of snap less the messages
// retention dropped, as the thread's document (atomic replace) and makes
// it the thread's snapshot; the log's lines are in it now (or dropped), so
// the log is emptied.
func (s *File) writeTrimmed(t *threadState, thread string, snap *snapshot, nd threadDoc) error {
	ver := 0
	if s.opt.AppendLog && snap.ver >= logVersion {
		ver = logVersion // a version 5 thread stays one (its next message may go to the log)
	}
	doc := appendDocumentV(nil, thread, nd, ver)
	pin, id, err := s.write(thread, doc, false)
	if err != nil {
		return err
	}
	ls := s.emptyLog(thread, snap.log) // its lines are in the document (or dropped)
	s.setSnap(t, &snapshot{id: id, pin: pin, sum: maphash.Bytes(docSeed, doc), doc: nd, base: nd, ver: ver, log: ls})
	return nil
}
