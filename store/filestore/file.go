// Package filestore is the file backend of store.Store: one JSON document
// per thread in DATA/chat, shared safely between processes (a server and
// the host CLI). It registers the "file" scheme with store.Register; a
// binary that opens "file:DIR" (or a bare folder) imports it.
package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
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
	// MaxOpenDocs bounds the threads whose document, lock file and log the
	// store keeps open (up to three descriptors each, see snapshot,
	// lockThread and appendLog); defaults to the smaller of MaxThreads and
	// an eighth of the process's descriptor limit, so that the store holds
	// at most three eighths of it. A thread past it stays cached but its
	// next read reads the file (and parses nothing if the bytes are the
	// cached ones). When the process runs out of descriptors anyway
	// (streams hold the rest), the store lets go of half of them and tries
	// again.
	MaxOpenDocs int
	// AppendLog makes a post that only adds a message append one line to
	// the thread's log (<thread>.log, log.go) instead of rewriting its
	// document: about four times less work per post, but <thread>.json is
	// then a snapshot (the log holds the newest messages) and is written
	// as version 5, which older binaries refuse. Off (the default), every
	// change rewrites the document, which then holds every message, at
	// the version its content needs, and no log is made. Either way the
	// store reads a thread's log (one that another process, with the
	// option on, wrote), and a write that rewrites the document empties it.
	AppendLog bool
	// Webhooks are the webhook destinations (store.DestinationID) every
	// write queues its events for (outbox.go); none: nothing is queued.
	Webhooks []string
	// TidyTemps removes a thread's temp files that a writer killed
	// mid-write left behind, the first time this process locks the thread
	// (under its lock, as the sweep does: never a live writer's). For a
	// process that runs no sweep (the host CLI, which opens the store
	// without store.Options.Serve): on a host where no server runs, a
	// temp file (which holds the thread's messages) would otherwise stay
	// for good. Off, only Sweep removes them.
	TidyTemps bool
	Log       *slog.Logger     // defaults to slog.Default()
	Now       func() time.Time // defaults to time.Now
}

// File is the file store: one JSON document per thread in <data>/chat.
//
// Writers take the thread's in-process mutex, then an flock on the sidecar
// <thread>.json.lock (never on the data file: the rename replaces that inode,
// so a lock on it would exclude nobody), read, modify, write a temp file in
// the same folder, fsync it, rename it over the document and fsync the
// folder; with FileOptions.AppendLog, a write that only adds a message
// appends it to the thread's log instead (<thread>.log, log.go). Readers
// take no lock: the rename makes
// every read see a whole old or a whole new document, and the log is read
// before it. Parsed documents are cached by file identity
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
	dir string
	// tmpDir is the folder of the temp files of the thread documents'
	// writes: the chat folder's subfolder tempFolder, made by the first
	// write that replaces a document (tempDir), so that a store nothing
	// was written to has none. A temp file there makes no event in the
	// chat folder's watch: a post's rename into the folder is its one
	// event (moved-to), where a temp file beside the documents added
	// three (its creation, its write, its moved-from), each read by
	// every process that follows the folder. tmpState is tmpUnknown
	// until the folder is made, tmpBeside if it cannot be (temp files
	// are then made in the chat folder, as before it). tmpFD is the
	// folder's descriptor (openDirFD, -1 where the system has none) while
	// tmpState is tmpReady: a temp file is made and renamed relative to
	// it, which walks one path component where its path walks them all.
	// A descriptor is closed only by Close: tmpFDs holds every one
	// opened, one a folder (a look again after a failed write finds the
	// folder it holds, and keeps its descriptor; a folder removed and made
	// again by hand is a new one). tmpMu guards the folder's making and
	// tmpFDs.
	tmpDir   string
	tmpState atomic.Int32
	tmpFD    atomic.Int32
	tmpMu    sync.Mutex
	tmpFDs   []heldDir
	opt      FileOptions
	log      *slog.Logger
	now      func() time.Time
	mu       sync.Mutex // guards threads
	tmap     map[string]*threadState

	createMu sync.Mutex // orders this process's thread creations (flock is per open file, not per goroutine)
	countMu  sync.Mutex // guards countF, and is held while it is locked (lockCount); taken after createMu
	countF   *os.File   // .threads.lock, kept open between locks; nil until the first
	// creating is the threads this process's calls have reserved and
	// not ended the creation of (reserveThread, endCreation); guarded by
	// creatingMu, which is taken under createMu or the thread's lock and
	// held for nothing else.
	creatingMu sync.Mutex
	creating   map[string]struct{}
	// adopted is the threads whose first upload, under the thread's lock,
	// found another call's creation under way (reserveThread), until the
	// upload ends: true once that call gave its reservation up meanwhile
	// (releaseThread), which the upload then keeps or gives back
	// (endAdoption). Guarded by createMu.
	adopted map[string]bool
	// reserving is how many places this process's calls counted
	// (reserveThread, or adopted) and have not yet resolved: their thread
	// on disk, or the place given back. A recount (countFolder) adds them,
	// which the folder may not show yet.
	reserving atomic.Int64
	// countSize is the length of .threads.lock as read or written under
	// the current lock (countFile.size); guarded by countMu.
	countSize int

	index   grantIndex   // share-token digests to threads (participants.go)
	claims  pushClaims   // the pushes this process claimed (push.go)
	journal *pushJournal // and journaled, until settled (pushjournal.go)
	pins    pinQueue     // the threads whose cached snapshot holds a descriptor
	dsync   *dirSync     // groups the folder fsyncs; nil with NoFsync
	// noTmpfile: a creation found no O_TMPFILE, or no /proc to link its
	// file through (createFD), so creations write a temp file and rename
	// it, as other writes do. A link refused otherwise (the name exists)
	// leaves it false.
	noTmpfile atomic.Bool

	// lastFail is the last append whose write failed, until a later write
	// or readiness probe of its size succeeds (Check).
	lastFail atomic.Pointer[writeFailure]

	hooks *hookWriter // queues webhook events; nil without FileOptions.Webhooks
	out   *outbox     // the deliverer's side of the queues (Outbox)

	feedMu   sync.Mutex // guards feeds
	feeds    map[*feed]struct{}
	closed   chan struct{} // closed by Close: the Follows end (ErrClosed)
	closing  sync.Once
	baseline sync.Once // the first Follow records what every thread already had

	agentsMu   sync.Mutex    // orders this process's writes of the agent keys (agents.go)
	agentsSeen atomic.Uint64 // the checksum of the agent keys file last announced
}

// threadState is this process's state of one thread.
type threadState struct {
	mu   threadMu                 // held by this process's writer, and by the feed while it announces
	snap atomic.Pointer[snapshot] // the newest parsed document seen
	// announced is the epoch of the newest message handed to the feed; guarded by mu.
	announced int64
	queued    bool   // in the pin queue; guarded by File.pins.mu
	lockf     *fdPin // <thread>.json.lock, kept open between writes (lockThread); guarded by mu
	// logf is the thread's log, open for appending, kept open between
	// writes like lockf (and closed with it), and the log's inode; nil
	// until an append opens it. Guarded by mu.
	logf   *os.File
	logIno uint64
	// drop asks the unlock of lockState to remove the lock file: its
	// holder found no document and wrote none. Guarded by mu.
	drop bool
	// tidied: its temp files were looked for (FileOptions.TidyTemps).
	// Guarded by mu.
	tidied bool
	// auditLines counts the lines of the thread's audit file, as this
	// process last counted and appended them (0: not counted yet); it
	// decides when the file is cut. Other processes' lines are counted
	// at the next cut. Guarded by mu.
	auditLines int
	// atts is the attachments index last parsed (attach.go).
	atts atomic.Pointer[indexSnap]
	// push is the push subscriptions record last parsed (push.go).
	push atomic.Pointer[pushSnap]
	// open are the pending interactions of the document last announced
	// (or read when the feed began): one that a later document no longer
	// holds was dropped by retention while pending, and is announced
	// closed (Batch.Closed, dropped in feed.go). Guarded by mu.
	open []store.Entry
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
		opt.Rescan = chatrelay.DefaultRescan
	}
	if opt.MaxOpenDocs <= 0 {
		opt.MaxOpenDocs = min(opt.MaxThreads, max(16, openFileLimit()/8))
	}
	var ds *dirSync
	if !opt.NoFsync {
		ds = newDirSync(filepath.Join(data, "chat"))
	}
	s := &File{
		dir:    filepath.Join(data, "chat"),
		opt:    opt,
		log:    opt.Log,
		now:    opt.Now,
		tmap:   make(map[string]*threadState),
		dsync:  ds,
		feeds:  make(map[*feed]struct{}),
		closed: make(chan struct{}),
		hooks:  newHookWriter(data, opt.Webhooks, !opt.NoFsync),
	}
	s.out = &outbox{s: s, dests: make(map[string]*destQueue)}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.journal = newPushJournal(data, !opt.NoFsync, s.log)
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s.tmpDir = joinName(s.dir, tempFolder)
	return s, nil
}

// tempFolder is the chat folder's subfolder of the documents' temp files.
const tempFolder = ".tmp"

// The states of File.tmpDir.
const (
	tmpUnknown = iota // not made yet, or gone (removed by hand)
	tmpReady          // a folder: temp files are made there
	tmpBeside         // it could not be made, or is not a folder of its own (a link, a file)
)

// tempDir returns the folder to make a document's temp file in, and its
// descriptor (-1: none, name it by its path): the temp folder, made if it
// is missing, or the chat folder if it cannot be.
func (s *File) tempDir() (string, int) {
	switch s.tmpState.Load() {
	case tmpReady:
		return s.tmpDir, int(s.tmpFD.Load())
	case tmpBeside:
		return s.dir, -1
	}
	s.tmpMu.Lock()
	defer s.tmpMu.Unlock()
	switch s.tmpState.Load() { // another writer made it meanwhile
	case tmpReady:
		return s.tmpDir, int(s.tmpFD.Load())
	case tmpBeside:
		return s.dir, -1
	}
	if err := os.Mkdir(s.tmpDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		s.tmpState.Store(tmpBeside)
		return s.dir, -1
	}
	if fi, err := os.Lstat(s.tmpDir); err != nil || !fi.IsDir() {
		s.tmpState.Store(tmpBeside)
		return s.dir, -1
	}
	fd := -1 // by its path, as a writer before it
	select {
	case <-s.closed: // Close has let go of the descriptors: hold none
	default:
		fd = s.holdDir(openDirFD(s.tmpDir))
	}
	s.tmpFD.Store(int32(fd))
	s.tmpState.Store(tmpReady)
	return s.tmpDir, fd
}

// heldDir is a descriptor of the temp folder (tmpFDs) and the folder it
// names.
type heldDir struct {
	fd       int
	dev, ino uint64
}

// holdDir keeps fd, a descriptor of the temp folder just opened (-1:
// none), in tmpFDs, or closes it and returns the one held for the same
// folder: a write that failed there (a full disk) makes the next look at
// the folder again, and each look kept one more descriptor until Close.
// The caller holds tmpMu.
func (s *File) holdDir(fd int) int {
	if fd < 0 {
		return -1
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1
	}
	for _, h := range s.tmpFDs {
		// A held descriptor keeps its folder's inode: no new folder
		// takes its number while it is held.
		if h.dev == uint64(st.Dev) && h.ino == st.Ino {
			syscall.Close(fd)
			return h.fd
		}
	}
	s.tmpFDs = append(s.tmpFDs, heldDir{fd: fd, dev: uint64(st.Dev), ino: st.Ino})
	return fd
}

// Outbox is the queue of webhook events (store.Outbox): its deliverer
// is the folder's server.
func (s *File) Outbox() store.Outbox { return s.out }

// Dir is the folder that holds the thread documents.
func (s *File) Dir() string { return s.dir }

// Close unpins the cached documents (every lock is held only inside a
// call); a read after Close pins again.
func (s *File) Close() error {
	s.closing.Do(func() { close(s.closed) })
	s.out.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tmap {
		s.setSnap(t, nil)
		t.closeLock()
	}
	if s.dsync != nil {
		s.dsync.close()
	}
	s.closeCount()
	s.journal.close()
	s.tmpMu.Lock()
	s.tmpFD.Store(-1) // a write after Close names the folder by its path
	for _, h := range s.tmpFDs {
		syscall.Close(h.fd)
	}
	s.tmpFDs = nil
	s.tmpMu.Unlock()
	return nil
}

// path is the thread's document: s.dir is clean (OpenFile) and a thread
// name is 16 hex digits, so the concatenation is filepath.Join's answer
// in one allocation instead of Join's three.
func (s *File) path(thread string) string { return s.dir + "/" + thread + ".json" }

func (s *File) state(thread string) *threadState {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tmap[thread]
	if t == nil {
		t = &threadState{mu: newThreadMu()}
		s.tmap[thread] = t
	}
	return t
}

func (s *File) peek(thread string) *threadState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tmap[thread]
}
