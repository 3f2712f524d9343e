package filestore

import (
	"errors"
	"hash/maphash"
	"io/fs"
	"os"
	"sync"
	"syscall"
)

// The descriptor cache: parsed documents are kept by file identity
// (inode, size, mtime), each pinning its file open so that the identity
// check is exact (snapshot); pins are bounded and give way when the
// process runs out of descriptors (pinQueue, withFDs).

// snapshot is one parsed version of a thread document; never modified.
//
// pin keeps the document's inode open while the snapshot is cached, so that
// the inode cannot be freed and its number reused: a file at the path with
// the snapshot's inode is then the very file it was read from, and since no
// writer ever changes a document in place (each write is a new file renamed
// over the old), its bytes are the snapshot's. That makes the identity check
// exact without reading the file. (An inode number alone, or with size and
// a coarse mtime, can deceive once the inode is freed: a reused inode, an
// equal size and an mtime in the same tick hid another process's write.)
//
// Pins are bounded (FileOptions.MaxOpenDocs): a snapshot whose pin was
// taken back keeps its document and the checksum of its bytes (sumOf), so
// a read of an unchanged thread still parses nothing, though it reads the
// file.
type snapshot struct {
	id  fileID
	pin *fdPin // nil once unpinned; closed when the snapshot is replaced or unpinned
	sum uint64 // maphash of the document's bytes, unless written
	// doc is the thread: base (what the document holds) and the messages
	// of the log (log.go) newer than it.
	doc  threadDoc
	base threadDoc
	ver  int      // the document's version (5: a log may follow it)
	log  logState // the log as doc has it
	err  error    // the document or the log does not parse
	// docErr is the document's own error (err without the log's).
	docErr error
	// written: this process wrote the document, whose bytes are then
	// appendDocument's of doc (deterministic); sum was not computed, and
	// sumOf computes it from doc if a read ever needs it (rarely: only a
	// read that finds another file at the path, of the same size).
	written bool
}

// sumOf is the maphash of the snapshot's bytes.
func (sn *snapshot) sumOf(thread string) uint64 {
	if !sn.written {
		return sn.sum
	}
	bp := docBufs.Get().(*[]byte)
	b := appendDocumentV((*bp)[:0], thread, sn.base, sn.ver)
	sum := maphash.Bytes(docSeed, b)
	*bp = b[:0]
	docBufs.Put(bp)
	return sum
}

// docSeed seeds the checksums of this process's snapshots.
var docSeed = maphash.MakeSeed()

// setSnap caches snap as the thread's document and unpins the snapshot it
// replaces. Each snapshot is swapped out once, so each pin is closed once.
// A pinned snap joins the pin queue, which unpins the oldest past the bound.
func (s *File) setSnap(t *threadState, snap *snapshot) {
	if pin := s.swapSnap(t, snap); pin != nil {
		pin.Close()
	}
}

// swapSnap is setSnap that hands the replaced snapshot's pin to the
// caller, who closes it (once), when it likes.
func (s *File) swapSnap(t *threadState, snap *snapshot) (replaced *fdPin) {
	if old := t.snap.Swap(snap); old != nil && old != snap && old.pin != nil && (snap == nil || old.pin != snap.pin) {
		replaced = old.pin
	}
	if snap != nil && snap.pin != nil {
		s.pins.add(t, s.opt.MaxOpenDocs)
	}
	return replaced
}

// takeOverSnap caches snap, a snapshot of the cached snapshot's document
// file with more of its log (an append to the log), in its place: snap
// takes over the cached snapshot's pin, if it still has one (an unpin
// may take it meanwhile: then snap has none). It returns the pin of a
// replaced snapshot of another file (a reader's, cached meanwhile), for
// the caller to close.
func (s *File) takeOverSnap(t *threadState, snap *snapshot) (replaced *fdPin) {
	for {
		cur := t.snap.Load()
		snap.pin = nil
		if cur != nil && cur.pin != nil && cur.id == snap.id {
			snap.pin = cur.pin
		}
		if t.snap.CompareAndSwap(cur, snap) {
			if cur != nil && cur.pin != nil && cur.pin != snap.pin {
				replaced = cur.pin
			}
			if snap.pin != nil {
				s.pins.add(t, s.opt.MaxOpenDocs)
			}
			return replaced
		}
	}
}

// pinQueue is the threads whose snapshots may hold a pin, oldest first,
// each at most once. Every pinned snapshot's thread is in it (a setter
// queues after its swap; unpinning reads the snapshot after dequeuing), so
// its length bounds the open descriptors.
type pinQueue struct {
	mu sync.Mutex
	q  []*threadState
}

func (pq *pinQueue) add(t *threadState, limit int) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if !t.queued {
		t.queued = true
		pq.q = append(pq.q, t)
	}
	pq.trim(limit)
}

// trim lets go of the oldest threads until at most limit remain. The
// caller holds pq.mu.
func (pq *pinQueue) trim(limit int) {
	for len(pq.q) > limit {
		old := pq.q[0]
		pq.q[0] = nil
		pq.q = pq.q[1:]
		old.queued = false
		old.unpin()
		old.closeLock()
	}
	if cap(pq.q) > 2*max(limit, 16) && len(pq.q) < cap(pq.q)/4 {
		pq.q = append([]*threadState(nil), pq.q...) // let the dequeued front go
	}
}

// release lets go of the older half of the kept threads (at least one):
// the process ran out of descriptors.
func (pq *pinQueue) release() {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	pq.trim(len(pq.q) / 2)
}

// outOfFDs reports whether err says the process or the system has no
// descriptor left.
func outOfFDs(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// withFDs runs open, and if it fails for want of a descriptor, lets go of
// half of the kept documents and lock files and runs it once more.
func (s *File) withFDs(open func() error) error {
	err := open()
	if outOfFDs(err) {
		s.log.Warn("out of file descriptors: closing half of the kept thread documents; raise the open-file limit (LimitNOFILE)", "err", err)
		s.pins.release()
		err = open()
	}
	return err
}

// openRead opens path read-only, as a bare descriptor, closing kept
// documents' descriptors if the process is out of them (withFDs).
func (s *File) openRead(path string) (int, error) {
	fd := -1
	err := s.withFDs(func() (err error) {
		return ignoringEINTR(func() (err error) {
			fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			return err
		})
	})
	return fd, err
}

// readFile is os.ReadFile through withFDs.
func (s *File) readFile(path string) (data []byte, err error) {
	err = s.withFDs(func() (err error) { data, err = os.ReadFile(path); return err })
	return data, err
}

// closeLock closes the thread's kept lock file, unless a writer holds
// the thread (then it stays open until the thread is let go of again):
// TryLock, because the caller may hold another thread's mutex, or this
// one's.
func (t *threadState) closeLock() {
	if !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	if t.lockf != nil {
		t.lockf.Close()
		t.lockf = nil
	}
	t.closeLog()
}

// unpin swaps the thread's pinned snapshot for an unpinned copy and closes
// its pin. If a newer snapshot is swapped in meanwhile, its setter closes
// the old pin and queues the thread again.
func (t *threadState) unpin() {
	cur := t.snap.Load()
	if cur == nil || cur.pin == nil {
		return
	}
	unpinned := *cur
	unpinned.pin = nil
	if t.snap.CompareAndSwap(cur, &unpinned) {
		cur.pin.Close()
	}
}

// openFileLimit is the process's descriptor limit (the Go runtime has
// raised the soft limit to the hard one), or 1024 if it cannot be read.
func openFileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(lim.Cur, 1<<30))
}

type fileID struct {
	ino, size int64
	mtime     int64
}

// identityOf is a file's identity from its stat(2) answer.
func identityOf(st *syscall.Stat_t) fileID {
	return fileID{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano()}
}

// load returns the thread's current document and log, from the cache
// when the file at the path is the cached snapshot's (pinned) inode, or
// holds the cached snapshot's bytes, and the log is the one the snapshot
// read (its inode and size: a log only grows until a compaction, which
// writes a new document). A missing document is (nil, nil).
func (s *File) load(thread string, t *threadState) (*snapshot, error) {
	return s.loadLogged(thread, t, nil)
}

// loadLogged is load that, if it finds no document and hasLog is not
// nil, sets *hasLog to whether the thread has a log all the same (one
// left by hand, or by a writer that lost its document: see mutateOnce).
// The log is opened first, as every read does, so a creation learns it
// for free.
func (s *File) loadLogged(thread string, t *threadState, hasLog *bool) (*snapshot, error) {
	// The fast path, two stats: a pinned snapshot pins its inode, so a
	// file at the path with that identity is the snapshot's very file. The
	// snapshot still cached after the stat was pinned during it (a
	// snapshot, once swapped out, never comes back). The log first, as
	// every read takes them (log.go); a document before logVersion has no
	// log to look at (a writer appends to a log only once the document is
	// at logVersion, a new file), so the default layout pays one stat.
	path := s.path(thread)
	if snap := t.snap.Load(); snap != nil && snap.pin != nil && !snap.log.torn() && (snap.ver < logVersion || sameLog(s.logPath(thread), snap.log)) {
		var st syscall.Stat_t
		err := ignoringEINTR(func() error { return syscall.Stat(path, &st) })
		if err == nil && identityOf(&st) == snap.id && t.snap.Load() == snap {
			return snap, nil
		}
	}
	return s.loadFrom(thread, t, true, hasLog)
}

// loadFrom is loadLogged past its fast path. With useCache, a log that
// is the cached snapshot's is not parsed again.
func (s *File) loadFrom(thread string, t *threadState, useCache bool, hasLog *bool) (*snapshot, error) {
	path := s.path(thread)
	var known logState
	cached := t.snap.Load()
	if useCache && cached != nil && cached.err == nil {
		known = cached.log
	}
	ls, logged, sameLog, lerr := s.readLog(thread, known)
	sameLog = sameLog && useCache
	// The log adds to the cached document what it did: the same lines, or none.
	logKept := sameLog || (useCache && ls.size == 0 && ls == known)
	if lerr != nil && !errors.Is(lerr, errBadDocument) {
		return nil, s.unavailable(thread, lerr)
	}
	fd, err := s.openRead(path)
	if err == syscall.ENOENT {
		s.setSnap(t, nil) // removed (swept) by another process
		if hasLog != nil {
			*hasLog = ls.ino != 0 || lerr != nil
		}
		return nil, nil
	}
	if err != nil {
		return nil, s.unavailable(thread, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	var st syscall.Stat_t
	if err := ignoringEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		syscall.Close(fd)
		return nil, s.unavailable(thread, &fs.PathError{Op: "stat", Path: path, Err: err})
	}
	id := identityOf(&st)
	// A pinned snapshot still cached now was pinned from before fd was
	// opened, so an equal inode is the same file, not a reused number.
	snap := &snapshot{id: id, pin: &fdPin{fd}, log: ls}
	sameBase := false // the document is the cached snapshot's
	old := t.snap.Load()
	if old != nil && old.pin != nil && old.id == id && t.snap.Load() == old {
		if logKept && old == cached {
			syscall.Close(fd)
			return old, nil
		}
		snap.sum, snap.written, snap.base, snap.ver, snap.err = old.sum, old.written, old.base, old.ver, old.docErr
		sameBase = true
	} else if sameBase, err = s.readBase(thread, path, fd, st.Size, old, snap); err != nil {
		syscall.Close(fd)
		return nil, s.unavailable(thread, err)
	}
	snap.docErr = snap.err
	if snap.err == nil {
		snap.err = lerr
	}
	switch {
	case snap.err != nil:
	case logKept && sameBase && old == cached:
		snap.doc = old.doc // the cached document and log: nothing parsed
	default:
		if sameLog {
			// The log is the one cached, but another snapshot was cached
			// meanwhile: read both again, the log first, parsing it.
			syscall.Close(fd)
			return s.loadFrom(thread, t, false, hasLog)
		}
		snap.doc, snap.err = withLog(snap.base, logged)
	}
	if snap.err != nil {
		s.log.Error("thread document does not parse; it is left as it is", "file", path, "err", snap.err)
	}
	s.setSnap(t, snap)
	return snap, nil
}

// readBase reads the document open at fd (size bytes by its stat) into
// snap: its checksum, and its base (document without its log) parsed,
// unless its bytes are those of old (the cached snapshot, another file
// with the same content): then old's base is taken, nothing parsed, and
// sameBase is true. A document that does not parse is snap.err, not err.
func (s *File) readBase(thread, path string, fd int, size int64, old, snap *snapshot) (sameBase bool, err error) {
	bp := docBufs.Get().(*[]byte)
	defer docBufs.Put(bp)
	data, err := readSized(fd, path, size, (*bp)[:0])
	*bp = data[:0]
	if err != nil {
		return false, err
	}
	snap.sum = maphash.Bytes(docSeed, data)
	if old != nil && old.id.size == snap.id.size && old.docErr == nil && old.sumOf(thread) == snap.sum {
		snap.base, snap.ver, snap.written = old.base, old.ver, old.written // the cached bytes: nothing to parse
		return true, nil
	}
	snap.base, snap.ver, snap.err = parseDocumentV(data, thread)
	return false, nil
}

// docBufs recycles the buffers documents are read into and encoded in.
// Nothing keeps the bytes: parseDocument copies what it keeps, and write
// has written them. Most loads (every append's, every poll's, and the
// folder event of this process's own write) find the cached snapshot
// current and read nothing at all.
var docBufs = sync.Pool{New: func() any { return new([]byte) }}

// readSized reads fd to the end into buf, sized from the file's size so that
// a whole document takes one read (io.ReadAll would grow its buffer from
// 512 bytes, copying and discarding a document's size twice over).
func readSized(fd int, name string, size int64, buf []byte) ([]byte, error) {
	if want := int(size) + 512; cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // the file grew since Fstat
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			return buf, nil // the end
		}
		buf = buf[:len(buf)+n]
	}
}
