package filestore

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The atomic write: a temp file in the same folder, fsynced, renamed over
// the document, and the folder fsynced (grouped: dirSync).

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
func writeFileSync(dir, name string, data []byte, ds *dirSync) (*os.File, fileID, error) {
	fd, tmp, id, err := writeFD(dir, -1, dir, name, data, ds)
	if err != nil {
		return nil, id, err
	}
	return os.NewFile(uintptr(fd), tmp), id, nil
}

// writeFD is writeFileSync on a bare descriptor, which it returns open
// (the caller closes it): a thread document's write keeps it as the
// snapshot's pin (fdPin), which costs no *os.File (its allocations, its
// cleanup, and the fcntl with which os.NewFile asks the descriptor's
// blocking mode). It renames with rename(2) itself: os.Rename first
// lstats the destination (to refuse a folder there, which rename(2)
// refuses as well). The temp file is made in tmpDir: dir, or a folder of
// dir's file system (File.tmpDir) whose changes ds need not sync (the
// rename's entry in dir is what a crash must keep; a temp file left is
// the sweep's). tmpFD is tmpDir's descriptor (openDirFD), relative to
// which the temp file is made, renamed and removed, or -1: by its path.
// tmp is the temp file's name before the rename: its path with tmpFD
// -1, else its name in tmpDir.
func writeFD(tmpDir string, tmpFD int, dir, name string, data []byte, ds *dirSync) (_ int, _ string, id fileID, err error) {
	// tf and tmp, not named results: a failed return sets the results
	// before the deferred cleanup runs, which must close and remove the
	// temp file (else its descriptor, and its room on the disk, are held
	// for good: a bare descriptor has no cleanup).
	tf, tmp, err := createTempFD(tmpDir, tmpFD, "."+name+".tmp-")
	if err != nil {
		return -1, "", id, err
	}
	tmpPath := func() string { // for an error: the temp file's path
		if tmpFD < 0 {
			return tmp
		}
		return joinName(tmpDir, tmp)
	}
	defer func() {
		if err != nil {
			syscall.Close(tf)
			unlinkAt(tmpFD, tmp)
		}
	}()
	if err = writeAll(tf, tmp, data); err != nil {
		return -1, "", id, &fs.PathError{Op: "write", Path: tmpPath(), Err: errors.Unwrap(err)}
	}
	if ds != nil {
		if err = ignoringEINTR(func() error { return syscall.Fsync(tf) }); err != nil {
			return -1, "", id, &fs.PathError{Op: "sync", Path: tmpPath(), Err: err}
		}
	}
	var st syscall.Stat_t
	if err = ignoringEINTR(func() error { return syscall.Fstat(tf, &st) }); err != nil {
		return -1, "", id, &fs.PathError{Op: "stat", Path: tmpPath(), Err: err}
	}
	path := joinName(dir, name)
	if err = ignoringEINTR(func() error { return renameAt(tmpFD, tmp, path) }); err != nil {
		return -1, "", id, &os.LinkError{Op: "rename", Old: tmpPath(), New: path, Err: err}
	}
	if ds != nil {
		if err = ds.sync(); err != nil {
			return -1, "", id, &unsyncedError{err}
		}
	}
	return tf, tmp, identityOf(&st), nil
}

// replaceRecord writes data as the record dir/name (writeFileSync:
// atomic, the folder fsynced by ds; nil: not at all). A folder fsync that
// fails once the new record has its name (unsyncedError) refuses the
// write, and prev, the record's bytes before it (nil: there was none), is
// put back, so that a refused change leaves nothing behind: no grant, key
// or subscription the caller was told was not stored. A put back that
// fails too is logged. The caller holds the record's lock.
func (s *File) replaceRecord(dir, name string, data, prev []byte, ds *dirSync) error {
	var f *os.File
	err := s.withFDs(func() (err error) {
		f, _, err = writeFileSync(dir, name, data, ds)
		return err
	})
	if err == nil {
		return f.Close()
	}
	var unsynced *unsyncedError
	if !errors.As(err, &unsynced) {
		return err // nothing was renamed
	}
	perr := s.withFDs(func() error {
		if prev == nil {
			return ignoringEINTR(func() error { return syscall.Unlink(joinName(dir, name)) })
		}
		f, _, err := writeFileSync(dir, name, prev, ds)
		if f != nil {
			f.Close()
		}
		return err
	})
	if perr != nil && !errors.As(perr, &unsynced) {
		s.log.Error("a refused change stays in its record: the record before it could not be put back", "record", name, "err", perr)
	}
	return err
}

// unsyncedError is a folder fsync that failed after the file got its name
// (rename or link): the file is there, but a crash may lose its name. A
// thread's creation takes the file back (write), so that a refused post
// leaves nothing behind.
type unsyncedError struct{ err error }

func (e *unsyncedError) Error() string { return e.err.Error() }
func (e *unsyncedError) Unwrap() error { return e.err }

// createHow is what createFD did: created the file (or failed with err),
// or did nothing, because the system cannot (noTmpfile) or not this time
// (notHere).
type createHow int

const (
	created createHow = iota
	noTmpfile
	notHere
)

// writeAll writes data to fd (a regular file: blocking) to the end.
func writeAll(fd int, name string, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: name, Err: err}
		}
		if n == 0 {
			return &fs.PathError{Op: "write", Path: name, Err: io.ErrShortWrite}
		}
		data = data[n:]
	}
	return nil
}

// ignoringEINTR runs fn again while it is interrupted.
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != syscall.EINTR {
			return err
		}
	}
}

// joinName is filepath.Join(dir, name) for a name without a separator,
// in one allocation when dir is clean (as the store's folders are).
func joinName(dir, name string) string {
	if dir == "" || dir == "/" || filepath.Clean(dir) != dir || name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return filepath.Join(dir, name)
	}
	return dir + "/" + name
}

// fdPin is a document's descriptor kept open as its snapshot's pin.
type fdPin struct{ fd int }

// Close closes the descriptor; called once (see setSnap).
func (p *fdPin) Close() error { return syscall.Close(p.fd) }

// createTemp creates a new file (mode 0600) named prefix + a random
// suffix in dir. It is os.CreateTemp without the poller: os.OpenFile
// tries to register every file with the network poller and sets its
// blocking mode back and forth (four fcntl and a failing epoll_ctl per
// file), a fifth of an append's system calls; os.NewFile of a blocking
// descriptor does neither.
func createTemp(dir, prefix string) (*os.File, string, error) {
	fd, name, err := createTempFD(dir, -1, prefix)
	if err != nil {
		return nil, "", err
	}
	return os.NewFile(uintptr(fd), name), name, nil
}

// createTempFD is createTemp's bare descriptor, made relative to dirfd,
// dir's descriptor (openDirFD), unless it is -1; name is then the file's
// name in dir, else its path.
func createTempFD(dir string, dirfd int, prefix string) (int, string, error) {
	for range 100 {
		var buf [20]byte
		name := prefix + string(strconv.AppendUint(buf[:0], rand.Uint64(), 36))
		if dirfd < 0 {
			name = joinName(dir, name)
		}
		fd, err := openAt(dirfd, name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
		if err == syscall.EEXIST || err == syscall.EINTR {
			continue
		}
		if err != nil {
			if dirfd >= 0 {
				name = joinName(dir, name)
			}
			return -1, "", &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return fd, name, nil
	}
	return -1, "", &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
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
