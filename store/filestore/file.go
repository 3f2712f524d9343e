// Package filestore is the file backend of store.Store: one JSON document
// per thread in DATA/chat, shared safely between processes (a server and
// the host CLI). It registers the "file" scheme with store.Register; a
// binary that opens "file:DIR" (or a bare folder) imports it.
package filestore

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"

	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofrs/flock"
)

// FileOptions configures a File store. Zero values take the defaults.
type FileOptions struct {
	Retention  chatrelay.Retention
	MaxThreads int  // defaults to chatrelay.DefaultMaxThreads
	NoFsync    bool // skip fsync: fast, but an acknowledged message may be lost on power failure
	// LockTimeout bounds the wait for another process's lock; defaults to
	// chatrelay.DefaultLockTimeout.
	LockTimeout time.Duration
	// Rescan is how often Follow re-reads changed threads even if the
	// folder watch said nothing; defaults to 2s.
	Rescan time.Duration
	// MaxOpenDocs bounds the threads whose document and lock file the
	// store keeps open (two descriptors each, see snapshot and
	// lockThread); defaults to the smaller of MaxThreads and an eighth of
	// the process's descriptor limit, so that the store holds at most a
	// quarter of it. A thread past it stays cached but its next read reads
	// the file (and parses nothing if the bytes are the cached ones). When
	// the process runs out of descriptors anyway (streams hold the rest),
	// the store lets go of half of them and tries again.
	MaxOpenDocs int
	Log         *slog.Logger     // defaults to slog.Default()
	Now         func() time.Time // defaults to time.Now
}

// File is the file store: one JSON document per thread in <data>/chat.
//
// Writers take the thread's in-process mutex, then an flock on the sidecar
// <thread>.json.lock (never on the data file: the rename replaces that inode,
// so a lock on it would exclude nobody), read, modify, write a temp file in
// the same folder, fsync it, rename it over the document and fsync the
// folder. Readers take no lock: the rename makes every read see a whole old
// or a whole new document. Parsed documents are cached by file identity
// (inode, size, mtime), so reading an unchanged thread parses nothing.
// Creating a thread is decided under a store-wide lock (.threads.lock), so
// two processes cannot both create the last thread the limit allows.
//
// A thread's lock file lives as long as its document: a holder of the
// lock that finds no document and writes none (a refused request, a
// creation that failed, a sweep that removed the thread) removes the lock
// file before it lets go of it, so that nothing is left of a thread that
// does not exist. Removing a lock file others may wait on would break
// exclusion (they would hold a lock on a file no one else can find), so
// every locker checks, once it holds the lock, that its file is still
// linked, and takes the one now at the path if not (lockThread). Lock
// files are empty.
type File struct {
	dir  string
	opt  FileOptions
	log  *slog.Logger
	now  func() time.Time
	mu   sync.Mutex // guards threads
	tmap map[string]*threadState

	createMu sync.Mutex // orders this process's thread creations (flock is per open file, not per goroutine)

	index grantIndex // share-token digests to threads (participants.go)
	pins  pinQueue   // the threads whose cached snapshot holds a descriptor
	dsync *dirSync   // groups the folder fsyncs; nil with NoFsync

	// lastFail is the last append whose write failed, until a later write
	// or readiness probe of its size succeeds (Check).
	lastFail atomic.Pointer[writeFailure]

	feedMu   sync.Mutex // guards feeds
	feeds    map[*feed]struct{}
	baseline sync.Once // the first Follow records what every thread already had
}

// threadState is this process's state of one thread.
type threadState struct {
	mu   sync.Mutex               // held by this process's writer, and by the feed while it announces
	snap atomic.Pointer[snapshot] // the newest parsed document seen
	// announced is the epoch of the newest message handed to the feed; guarded by mu.
	announced int64
	queued    bool     // in the pin queue; guarded by File.pins.mu
	lockf     *os.File // <thread>.json.lock, kept open between writes (lockThread); guarded by mu
	// drop asks the unlock of lockState to remove the lock file: its
	// holder found no document and wrote none. Guarded by mu.
	drop bool
	// auditLines counts the lines of the thread's audit file, as this
	// process last counted and appended them (0: not counted yet); it
	// decides when the file is cut. Other processes' lines are counted
	// at the next cut. Guarded by mu.
	auditLines int
}

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
// taken back keeps its document and the checksum of its bytes, so a read
// of an unchanged thread still parses nothing, though it reads the file.
type snapshot struct {
	id  fileID
	pin *os.File // nil once unpinned; closed when the snapshot is replaced or unpinned
	sum uint64   // maphash of the document's bytes
	doc threadDoc
	err error // the document does not parse
}

// docSeed seeds the checksums of this process's snapshots.
var docSeed = maphash.MakeSeed()

// setSnap caches snap as the thread's document and unpins the snapshot it
// replaces. Each snapshot is swapped out once, so each pin is closed once.
// A pinned snap joins the pin queue, which unpins the oldest past the bound.
func (s *File) setSnap(t *threadState, snap *snapshot) {
	if old := t.snap.Swap(snap); old != nil && old != snap && old.pin != nil {
		old.pin.Close()
	}
	if snap != nil && snap.pin != nil {
		s.pins.add(t, s.opt.MaxOpenDocs)
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
}

// unpin swaps the thread's pinned snapshot for an unpinned copy and closes
// its pin. If a newer snapshot is swapped in meanwhile, its setter closes
// the old pin and queues the thread again.
func (t *threadState) unpin() {
	cur := t.snap.Load()
	if cur == nil || cur.pin == nil {
		return
	}
	if t.snap.CompareAndSwap(cur, &snapshot{id: cur.id, sum: cur.sum, doc: cur.doc, err: cur.err}) {
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

func identity(fi fs.FileInfo) fileID {
	id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(st.Ino)
	}
	return id
}

var _ store.Store = (*File)(nil)

// OpenFile opens (creating if needed, mode 0700) the file store under data.
func OpenFile(data string, opt FileOptions) (*File, error) {
	opt.Retention = opt.Retention.WithDefaults()
	if opt.MaxThreads <= 0 {
		opt.MaxThreads = chatrelay.DefaultMaxThreads
	}
	if opt.LockTimeout <= 0 {
		opt.LockTimeout = chatrelay.DefaultLockTimeout
	}
	if opt.Rescan <= 0 {
		opt.Rescan = 2 * time.Second
	}
	if opt.MaxOpenDocs <= 0 {
		opt.MaxOpenDocs = min(opt.MaxThreads, max(16, openFileLimit()/8))
	}
	var ds *dirSync
	if !opt.NoFsync {
		ds = newDirSync(filepath.Join(data, "chat"))
	}
	s := &File{
		dir:   filepath.Join(data, "chat"),
		opt:   opt,
		log:   opt.Log,
		now:   opt.Now,
		tmap:  make(map[string]*threadState),
		dsync: ds,
		feeds: make(map[*feed]struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return s, nil
}

// Dir is the folder that holds the thread documents.
func (s *File) Dir() string { return s.dir }

// Close unpins the cached documents (every lock is held only inside a
// call); a read after Close pins again.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tmap {
		s.setSnap(t, nil)
		t.closeLock()
	}
	if s.dsync != nil {
		s.dsync.close()
	}
	return nil
}

func (s *File) path(thread string) string { return filepath.Join(s.dir, thread+".json") }

func (s *File) state(thread string) *threadState {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tmap[thread]
	if t == nil {
		t = new(threadState)
		s.tmap[thread] = t
	}
	return t
}

func (s *File) peek(thread string) *threadState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tmap[thread]
}

func checkThread(thread string) error {
	if !chatrelay.ValidThread(thread) {
		return chatrelay.Errorf(chatrelay.InvalidThread, "a thread id is 16 lowercase hex characters")
	}
	return nil
}

// load returns the thread's current document, from the cache when the
// file at the path is the cached snapshot's (pinned) inode, or holds the
// cached snapshot's bytes. A missing file is (nil, nil).
func (s *File) load(thread string, t *threadState) (*snapshot, error) {
	// The fast path, one stat: a pinned snapshot pins its inode, so a file
	// at the path with that identity is the snapshot's very file. The
	// snapshot still cached after the stat was pinned during it (a
	// snapshot, once swapped out, never comes back).
	if snap := t.snap.Load(); snap != nil && snap.pin != nil {
		fi, err := os.Stat(s.path(thread))
		if err == nil && identity(fi) == snap.id && t.snap.Load() == snap {
			return snap, nil
		}
	}
	var f *os.File
	err := s.withFDs(func() (err error) { f, err = os.Open(s.path(thread)); return err })
	if errors.Is(err, fs.ErrNotExist) {
		s.setSnap(t, nil) // removed (swept) by another process
		return nil, nil
	}
	if err != nil {
		return nil, s.unavailable(thread, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, s.unavailable(thread, err)
	}
	id := identity(fi)
	// A pinned snapshot still cached now was pinned from before f was
	// opened, so an equal inode is the same file, not a reused number.
	if snap := t.snap.Load(); snap != nil && snap.pin != nil && snap.id == id && t.snap.Load() == snap {
		f.Close()
		return snap, nil
	}
	bp := docBufs.Get().(*[]byte)
	defer docBufs.Put(bp)
	data, err := readSized(f, fi.Size(), (*bp)[:0])
	*bp = data[:0]
	if err != nil {
		f.Close()
		return nil, s.unavailable(thread, err)
	}
	snap := &snapshot{id: id, pin: f, sum: maphash.Bytes(docSeed, data)}
	if old := t.snap.Load(); old != nil && old.sum == snap.sum && old.id.size == id.size {
		snap.doc, snap.err = old.doc, old.err // the cached bytes: nothing to parse
	} else {
		snap.doc, snap.err = parseDocument(data, thread)
		if snap.err != nil {
			s.log.Error("thread document does not parse; it is left as it is", "file", s.path(thread), "err", snap.err)
		}
	}
	s.setSnap(t, snap)
	return snap, nil
}

// docBufs recycles the buffers documents are read into and encoded in.
// Nothing keeps the bytes: parseDocument copies what it keeps, and write
// has written them. Most loads (every append's, every poll's, and the
// folder event of this process's own write) find the cached snapshot
// current and read nothing at all.
var docBufs = sync.Pool{New: func() any { return new([]byte) }}

// readSized reads f to the end into buf, sized from the file's size so that
// a whole document takes one read (io.ReadAll would grow its buffer from
// 512 bytes, copying and discarding a document's size twice over).
func readSized(f *os.File, size int64, buf []byte) ([]byte, error) {
	if want := int(size) + 512; cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // the file grew since Stat
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

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
	if err := checkThread(thread); err != nil {
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

// lockState locks a thread against this process's other goroutines
// (t.mu) and other processes (lockThread), and returns its state and the
// one function that unlocks both.
func (s *File) lockState(ctx context.Context, thread string) (*threadState, func(), error) {
	t := s.state(thread)
	t.mu.Lock()
	fd, err := s.lockThread(ctx, t, thread)
	if err != nil {
		t.mu.Unlock()
		return nil, nil, err
	}
	return t, func() {
		if t.drop {
			// Removed while held: a waiter then finds its file unlinked
			// (lockThread) and takes the one at the path. Closing the
			// file lets go of the lock.
			t.drop = false
			os.Remove(s.path(thread) + ".lock")
			t.lockf.Close()
			t.lockf = nil
		} else {
			syscall.Flock(fd, syscall.LOCK_UN)
		}
		t.mu.Unlock()
	}, nil
}

// lockThread takes the exclusive flock of the thread's lock file,
// <thread>.json.lock, for a caller holding t.mu, waiting up to
// LockTimeout. It keeps the file open between writes (until the thread
// is let go of, with its pinned document): a write then
// costs two flock(2) calls, where gofrs/flock opens and closes the file
// each time (open, four fcntl and an epoll_ctl of os.OpenFile, two flock,
// close: nine system calls, two fifths of an append's). It is the same
// flock(2) lock on the same file, so another locker of it (gofrs/flock)
// is excluded alike. Once it holds the lock it checks that the file is
// still linked: a holder that found no document removes the lock file
// (lockState), and a lock on a removed file excludes no one who opens the
// path after the removal, so it then takes the file at the path instead.
// It returns the locked descriptor; lockState, its one caller, unlocks it.
func (s *File) lockThread(ctx context.Context, t *threadState, thread string) (lockedFD int, err error) {
	path := s.path(thread) + ".lock"
	for {
		if t.lockf == nil {
			f, err := s.openLock(thread, path)
			if err != nil {
				return -1, err
			}
			t.lockf = f
			s.pins.add(t, s.opt.MaxOpenDocs) // its descriptor is bounded with the pinned documents'
		}
		fd := int(t.lockf.Fd())
		if err := flockWait(ctx, fd, path, s.opt.LockTimeout); err != nil {
			return -1, err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Flock(fd, syscall.LOCK_UN)
			return -1, s.unavailable(thread, &fs.PathError{Op: "fstat", Path: path, Err: err})
		}
		if st.Nlink > 0 {
			return fd, nil
		}
		t.lockf.Close() // removed by the holder before us: lets go of the lock
		t.lockf = nil
	}
}

// openLock opens (creating, 0600, for writing as NFS's flock emulation
// needs) the lock file path of thread ("" for the store-wide one), letting
// go of kept files if the process is out of descriptors. It opens with
// syscall.Open: os.OpenFile would register the file with the network
// poller and set its blocking mode back and forth, for a file that is
// only ever flocked, read and written at an offset.
func (s *File) openLock(thread, path string) (*os.File, error) {
	var fd int
	err := s.withFDs(func() (err error) {
		fd, err = syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return nil, s.unavailable(thread, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	return os.NewFile(uintptr(fd), path), nil
}

// flockWait takes an exclusive flock on fd, the open file path, waiting up
// to timeout: StoreUnavailable ("busy") if it cannot be had.
func flockWait(ctx context.Context, fd int, path string, timeout time.Duration) error {
	busy := func(err error) error {
		return &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store is busy", Retry: time.Second, Err: fmt.Errorf("lock %s: %w", filepath.Base(path), err)}
	}
	err := flockNB(fd)
	if err == syscall.EWOULDBLOCK {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for err == syscall.EWOULDBLOCK {
			select {
			case <-ctx.Done():
				return busy(ctx.Err())
			case <-tick.C:
				err = flockNB(fd)
			}
		}
	}
	if err != nil {
		return busy(err)
	}
	return nil
}

// flockNB tries once to take an exclusive flock on fd.
func flockNB(fd int) error {
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

// newFlock returns an flock on path, which is created 0600 and opened for
// writing (as NFS's emulation of flock needs).
func newFlock(path string) *flock.Flock {
	return flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
}

// lockPath takes an exclusive flock on path (created 0600 if missing),
// waiting up to timeout; StoreUnavailable if it cannot.
func lockPath(ctx context.Context, path string, timeout time.Duration) (unlock func(), err error) {
	fl := newFlock(path)
	ok, err := fl.TryLock()
	if err == nil && !ok {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ok, err = fl.TryLockContext(ctx, time.Millisecond)
	}
	if err != nil || !ok {
		if err == nil {
			err = errors.New("lock not acquired")
		}
		return nil, &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store is busy", Retry: time.Second, Err: fmt.Errorf("lock %s: %w", filepath.Base(path), err)}
	}
	return func() { fl.Unlock() }, nil
}

// Append implements Store.
func (s *File) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	if err := checkThread(thread); err != nil {
		return store.Entry{}, err
	}
	ix, err := m.Prepare(s.now())
	if err != nil {
		return store.Entry{}, err
	}
	var e store.Entry
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
		nd, ne, err := appendTo(d, m, ix, s.opt.Retention, now)
		e = ne
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
		if err := s.writeGrants(thread, counted); err != nil {
			return d, nil, err // nothing stored
		}
		return nd, func() {
			if err := s.writeGrants(thread, grants); err != nil {
				s.log.Warn("a post the store refused stays counted in its share link's sent", "thread", thread, "participant", m.Participant, "err", err)
			}
		}, nil
	})
	return e, err
}

// Change implements Store.
func (s *File) Change(ctx context.Context, thread string, c store.Change) (store.Entry, error) {
	if err := checkThread(thread); err != nil {
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
// retry.
func (s *File) mutateOnce(ctx context.Context, thread string, create bool, fn mutation) (retry bool, err error) {
	notFound := func() error { return chatrelay.Errorf(chatrelay.NotFound, "no thread %s", thread) }
	creating := !s.mayExist(thread)
	if creating {
		if !create {
			return false, notFound()
		}
		if creating, err = s.reserveThread(ctx, thread); err != nil {
			return false, err
		}
	}
	created := false
	if creating {
		defer func() { // after the thread's lock is released (deferred below)
			if !created {
				s.releaseThread(ctx)
			}
		}()
	}
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return false, err
	}
	defer unlock()
	snap, err := s.load(thread, t) // now that no other process writes
	if err != nil {
		return false, err
	}
	if snap == nil {
		// No document: unless this call writes one, its lock file goes
		// (before the deferred unlock, which removes it).
		defer func() { t.drop = !created }()
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
	}
	nd, undo, ferr := fn(old, s.now())
	if sameDoc(nd, old) {
		return false, ferr
	}
	bp := docBufs.Get().(*[]byte)
	doc := appendDocument((*bp)[:0], thread, nd)
	pin, id, err := s.write(thread, doc)
	if err != nil {
		s.lastFail.Store(&writeFailure{size: len(doc), err: err})
	} else if s.lastFail.Load() != nil {
		s.lastFail.Store(nil)
	}
	sum := maphash.Bytes(docSeed, doc)
	*bp = doc[:0]
	docBufs.Put(bp)
	if err != nil {
		if undo != nil {
			undo()
		}
		return false, err
	}
	created = snap == nil
	s.setSnap(t, &snapshot{id: id, pin: pin, sum: sum, doc: nd})
	s.announce(thread, t, nd)
	return false, ferr
}

// reserveThread counts a thread about to be created, under the store-wide
// lock: ThreadLimit if the store is full. Counted before the document
// exists, a crash in between overstates the count (the sweep recounts),
// never understates it. It reports false if the thread exists after all
// (another process created it): nothing is counted then.
func (s *File) reserveThread(ctx context.Context, thread string) (bool, error) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	c, err := s.lockCount(ctx)
	if err != nil {
		return false, err
	}
	defer c.unlock()
	if _, err := os.Stat(s.path(thread)); !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	count, err := s.threadCount(c)
	if err != nil {
		return false, s.unavailable(thread, err)
	}
	if count >= s.opt.MaxThreads {
		return false, chatrelay.Errorf(chatrelay.ThreadLimit, "thread limit reached")
	}
	setThreadCount(c, count+1)
	return true, nil
}

// releaseThread gives back a reservation that created nothing. If the
// store-wide lock cannot be had, the count stays one too high until the
// next sweep recounts.
func (s *File) releaseThread(ctx context.Context) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	c, err := s.lockCount(context.WithoutCancel(ctx))
	if err != nil {
		s.log.Warn("thread count stays one too high until the next sweep", "err", err)
		return
	}
	defer c.unlock()
	if count, err := s.threadCount(c); err == nil && count > 0 {
		setThreadCount(c, count-1)
	}
}

// sameDoc reports whether fn left the document as it was.
func sameDoc(a, b threadDoc) bool {
	return a.rev == b.rev && a.trimmed == b.trimmed && a.trimmedRev == b.trimmedRev && len(a.msgs) == len(b.msgs) &&
		(len(a.msgs) == 0 || &a.msgs[0] == &b.msgs[0])
}

// write replaces the thread's document atomically (writeFile). It returns
// the new file, still open (the snapshot's pin), and its identity.
func (s *File) write(thread string, doc []byte) (pin *os.File, id fileID, err error) {
	err = s.withFDs(func() (err error) { pin, id, err = writeFileSync(s.dir, thread+".json", doc, s.dsync); return err })
	if err != nil {
		return nil, id, s.unavailable(thread, err)
	}
	return pin, id, nil
}

// writeFile replaces dir/name atomically: a temp file in the same folder
// (mode 0600), write, fsync, rename over name, fsync of the folder (the
// syncs only if sync). A reader that takes no lock sees the whole old file
// or the whole new one. The caller holds name's lock. It returns the new
// file, still open, and its identity; on error it leaves no temp file.
func writeFile(dir, name string, data []byte, sync bool) (f *os.File, id fileID, err error) {
	var ds *dirSync
	if sync {
		ds = newDirSync(dir)
		defer ds.close()
	}
	return writeFileSync(dir, name, data, ds)
}

// writeFileSync is writeFile with the folder's fsync done by ds (nil: no
// fsync at all), which groups the fsyncs of concurrent writers.
func writeFileSync(dir, name string, data []byte, ds *dirSync) (_ *os.File, id fileID, err error) {
	// tf, not a named result: a failed return sets the result to nil
	// before the deferred cleanup runs, which must close the file (else
	// its descriptor, and a removed temp file's room on the disk, are
	// held until the garbage collector finds it).
	tf, tmp, err := createTemp(dir, "."+name+".tmp-")
	if err != nil {
		return nil, id, err
	}
	defer func() {
		if err != nil {
			tf.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = tf.Write(data); err != nil {
		return nil, id, err
	}
	if ds != nil {
		if err = tf.Sync(); err != nil {
			return nil, id, err
		}
	}
	fi, err := tf.Stat()
	if err != nil {
		return nil, id, err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return nil, id, err
	}
	if ds != nil {
		if err = ds.sync(); err != nil {
			return nil, id, err
		}
	}
	return tf, identity(fi), nil
}

// createTemp creates a new file (mode 0600) named prefix + a random
// suffix in dir. It is os.CreateTemp without the poller: os.OpenFile
// tries to register every file with the network poller and sets its
// blocking mode back and forth (four fcntl and a failing epoll_ctl per
// file), a fifth of an append's system calls; os.NewFile of a blocking
// descriptor does neither.
func createTemp(dir, prefix string) (*os.File, string, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
		if err == syscall.EEXIST || err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, "", &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), name, nil
	}
	return nil, "", &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}

// dirSync groups the folder fsyncs of concurrent writers (group commit):
// a rename is made durable by any fsync of the folder that starts after
// it, so a writer waits for the running fsync (which may not cover it)
// and then shares the next one with every writer that renamed meanwhile.
// With --fsync always under concurrent posts, that is one folder fsync
// per round instead of one per post.
type dirSync struct {
	dir string

	mu      sync.Mutex
	cond    sync.Cond // signalled when a sync ends; L is &mu
	f       *os.File  // the folder, opened by the first sync
	started uint64    // syncs started
	done    uint64    // syncs finished (they run one at a time, in order)
	running bool
	failed  map[uint64]error // recent syncs that failed, by number

	fsyncFn func() error // d.fsync; a test's stand-in
}

func newDirSync(dir string) *dirSync {
	d := &dirSync{dir: dir}
	d.cond.L = &d.mu
	d.fsyncFn = d.fsync
	return d
}

// sync returns once a folder fsync that started after the call has
// finished, with its error.
func (d *dirSync) sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	need := d.started + 1 // a running sync may have started before our rename
	for d.done < need {
		if d.running {
			d.cond.Wait()
			continue
		}
		d.running = true
		d.started++
		n := d.started
		d.mu.Unlock()
		err := d.fsyncFn()
		d.mu.Lock()
		d.running = false
		d.done = n
		if err != nil {
			if d.failed == nil || len(d.failed) > 64 {
				d.failed = make(map[uint64]error)
			}
			d.failed[n] = err
		}
		d.cond.Broadcast()
	}
	return d.failed[need] // sync number need is the first that covers us
}

// fsync syncs the folder; the caller is the one running sync, so it
// alone touches d.f.
func (d *dirSync) fsync() error {
	if d.f == nil {
		f, err := os.Open(d.dir)
		if err != nil {
			return err
		}
		d.f = f
	}
	if err := d.f.Sync(); err != nil {
		d.f.Close() // a fresh descriptor next time
		d.f = nil
		return err
	}
	return nil
}

// close closes the folder once no sync runs; a later sync reopens it.
func (d *dirSync) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.running {
		d.cond.Wait()
	}
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
}

// The thread count is kept in .threads.lock itself (the lock file is
// never renamed or removed, and it is read and written only under its
// lock, through the descriptor the lock is held on), so that creating a
// thread costs the same whatever the number of threads: no folder
// listing. A count that does not read is recounted from the folder; every
// sweep recounts it.
func (s *File) threadCountPath() string { return filepath.Join(s.dir, ".threads.lock") }

// countFile is .threads.lock, open and locked.
type countFile struct{ f *os.File }

// lockCount opens .threads.lock (letting go of kept files if the process
// is out of descriptors) and takes its flock, waiting up to LockTimeout.
func (s *File) lockCount(ctx context.Context) (countFile, error) {
	path := s.threadCountPath()
	f, err := s.openLock("", path)
	if err != nil {
		return countFile{}, err
	}
	if err := flockWait(ctx, int(f.Fd()), path, s.opt.LockTimeout); err != nil {
		f.Close()
		return countFile{}, err
	}
	return countFile{f}, nil
}

// unlock closes the file, which lets go of its flock.
func (c countFile) unlock() { c.f.Close() }

// threadCount reads the count, or recounts the folder if it does not read.
func (s *File) threadCount(c countFile) (int, error) {
	var buf [24]byte
	n, err := c.f.ReadAt(buf[:], 0)
	if err != nil && err != io.EOF {
		return 0, err
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(buf[:n]))); err == nil && n >= 0 {
		return n, nil
	}
	names, err := s.threadNames()
	if err != nil {
		return 0, err
	}
	setThreadCount(c, len(names))
	return len(names), nil
}

// setThreadCount writes the count in place. A failure leaves a count that
// does not read, which is recounted.
func setThreadCount(c countFile, n int) {
	b := strconv.AppendInt(make([]byte, 0, 24), int64(n), 10)
	b = append(b, '\n')
	if _, err := c.f.WriteAt(b, 0); err == nil {
		c.f.Truncate(int64(len(b)))
	}
}

// recount sets the count to the folder's threads.
func (s *File) recount(ctx context.Context) error {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	c, err := s.lockCount(ctx)
	if err != nil {
		return err
	}
	defer c.unlock()
	names, err := s.threadNames()
	if err != nil {
		return err
	}
	setThreadCount(c, len(names))
	return nil
}

// threadNames lists the threads that have a document.
func (s *File) threadNames() ([]string, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".json")
		if ok && de.Type().IsRegular() && chatrelay.ValidThread(name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// Threads implements Store.
func (s *File) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	names, err := s.threadNames()
	if err != nil {
		return nil, s.unavailable("", err)
	}
	infos := make([]store.ThreadInfo, 0, len(names))
	for _, name := range names {
		snap, err := s.load(name, s.state(name))
		if err != nil {
			return nil, err
		}
		if snap == nil || snap.err != nil || len(snap.doc.msgs) == 0 {
			continue // removed meanwhile, or unreadable (logged by load)
		}
		infos = append(infos, threadInfo(name, snap.doc))
	}
	sortThreads(infos)
	return infos, nil
}

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
	// A writer killed while creating a thread leaves a temp file and no
	// document: clean those up too, under the thread's lock like the rest.
	for _, name := range s.orphanTemps(names) {
		if _, _, err := s.sweepThread(ctx, name); err != nil {
			s.log.Warn("sweep", "thread", name, "err", err)
		}
	}
	if err := s.recount(ctx); err != nil {
		s.log.Warn("sweep: recount the threads", "err", err)
	}
	return st, nil
}

// orphanTemps lists the threads, other than those in docs, that have temp files.
func (s *File) orphanTemps(docs []string) []string {
	tmps, _ := filepath.Glob(filepath.Join(s.dir, ".*.json.tmp-*"))
	var out []string
	for _, tmp := range tmps {
		name, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(tmp), "."), ".json.tmp-")
		if chatrelay.ValidThread(name) && !slices.Contains(docs, name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func (s *File) sweepThread(ctx context.Context, thread string) (dropped int, removed bool, err error) {
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	for _, pattern := range []string{".json.tmp-*", ".participants.json.tmp-*", ".audit.jsonl.tmp-*"} {
		tmps, _ := filepath.Glob(filepath.Join(s.dir, "."+thread+pattern))
		for _, tmp := range tmps {
			os.Remove(tmp)
		}
	}
	snap, err := s.load(thread, t)
	if err != nil {
		return 0, false, err
	}
	if snap == nil {
		t.drop = true // a thread with no document (temp files of a writer killed while creating it)
		return 0, false, nil
	}
	if snap.err != nil {
		return 0, false, unreadable(snap)
	}
	d := snap.doc
	msgs, trimmed, trimmedRev := trim(s.opt.Retention, d.msgs, s.now(), d.trimmed, d.trimmedRev)
	dropped = len(d.msgs) - len(msgs)
	if dropped == 0 {
		return 0, false, nil
	}
	if len(msgs) == 0 {
		if err := os.Remove(s.path(thread)); err != nil {
			return 0, false, s.unavailable(thread, err)
		}
		// The thread is gone: its grants, audit and lock file go with it.
		for _, p := range []string{s.participantsPath(thread), s.auditPath(thread)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("sweep: remove", "thread", thread, "err", err)
			}
		}
		s.announceParticipants(thread)
		if s.dsync != nil {
			s.dsync.sync()
		}
		s.setSnap(t, nil)
		t.drop = true // and its lock file
		return dropped, true, nil
	}
	nd := threadDoc{msgs: msgs, trimmed: trimmed, trimmedRev: trimmedRev, rev: d.rev}
	doc := appendDocument(nil, thread, nd)
	pin, id, err := s.write(thread, doc)
	if err != nil {
		return 0, false, err
	}
	s.setSnap(t, &snapshot{id: id, pin: pin, sum: maphash.Bytes(docSeed, doc), doc: nd})
	return dropped, false, nil
}
