package filestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/chatrelay/chatrelay"
)

// reserveThread counts a thread about to be created, under the store-wide
// lock: ThreadLimit if the store is full. A thread is counted once it has
// a document or an attachments folder (uploads made before its first
// message: counted, a client holding many tokens cannot keep uploads in
// as many message-less threads as it likes), so it is counted by
// whichever comes first. Counted before the document or folder exists, a
// crash in between overstates the count (the sweep recounts), never
// understates it. It reports creating false if the thread exists after
// all (another process created it), or if another call of this process
// has reserved it and not ended its creation yet (endCreation): nothing is
// counted then, and the caller waits for the thread's lock, under which
// the creator writes the document. (Counting it twice would refuse the
// second post with ThreadLimit at the limit, for a thread that is about
// to exist, and cost a reservation given back otherwise.) It reports
// creating true and counted false for a thread its uploads count already.
//
// An upload (upload true) reserves under the thread's lock, which the
// call creating the thread waits for, and that call may give up (its
// wait ends) before the upload's folder exists: the upload adopts its
// reservation (adopted) until it ends (endAdoption), so that the
// reservation is given back only if neither stores anything.
func (s *File) reserveThread(ctx context.Context, thread string, upload bool) (creating, counted bool, err error) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	s.creatingMu.Lock()
	_, busy := s.creating[thread]
	s.creatingMu.Unlock()
	if busy {
		if upload {
			if s.adopted == nil {
				s.adopted = make(map[string]bool)
			}
			s.adopted[thread] = false
			s.reserving.Add(1) // until endAdoption
		}
		return false, false, nil
	}
	c, err := s.lockCount(ctx)
	if err != nil {
		return false, false, err
	}
	defer c.unlock()
	if _, err := os.Stat(s.path(thread)); !errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if s.hasFiles(thread) {
		return true, false, nil
	}
	count, err := s.threadCount(c)
	if err != nil {
		return false, false, s.unavailable(thread, err)
	}
	if count >= s.opt.MaxThreads {
		return false, false, chatrelay.Errorf(chatrelay.ThreadLimit, "thread limit reached")
	}
	setThreadCount(c, count+1)
	s.reserving.Add(1) // until the creation's finish
	s.creatingMu.Lock()
	if s.creating == nil {
		s.creating = make(map[string]struct{})
	}
	s.creating[thread] = struct{}{}
	s.creatingMu.Unlock()
	return true, true, nil
}

// hasFiles reports whether thread has an attachments folder.
func (s *File) hasFiles(thread string) bool {
	fi, err := os.Stat(s.filesDir(thread))
	return err == nil && fi.IsDir()
}

// endCreation ends the creation of thread that reserveThread reserved:
// another call may reserve it again. Its caller calls it once, before it
// lets go of the thread's lock (or when it failed to take it).
func (s *File) endCreation(thread string) {
	s.creatingMu.Lock()
	delete(s.creating, thread)
	s.creatingMu.Unlock()
}

// releaseThread gives back a reservation of thread that created nothing,
// unless the thread has an attachments folder and no document now: an
// upload of this process took its place while the reservation stood
// (reserveThread: it counted nothing), and its place stays taken; or
// leaves it to such an upload still under way (adopted), which keeps it
// if it is stored. If the store-wide lock cannot be had, the count stays
// one too high until the next sweep recounts.
func (s *File) releaseThread(ctx context.Context, thread string) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if _, ok := s.adopted[thread]; ok {
		s.adopted[thread] = true // the upload under way keeps it, or gives it back
		return
	}
	s.giveBack(ctx, thread)
}

// endAdoption ends an upload's adoption of another call's reservation of
// thread (reserveThread), if it made one: a reservation that call gave
// up meanwhile is given back unless the upload is stored (stored).
func (s *File) endAdoption(ctx context.Context, thread string, stored bool) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	given, ok := s.adopted[thread]
	if !ok {
		return
	}
	delete(s.adopted, thread)
	if given && !stored {
		s.giveBack(ctx, thread)
	}
	s.reserving.Add(-1)
}

// giveBack is releaseThread's count, under createMu.
func (s *File) giveBack(ctx context.Context, thread string) {
	c, err := s.lockCount(context.WithoutCancel(ctx))
	if err != nil {
		s.log.Warn("thread count stays one too high until the next sweep", "err", err)
		return
	}
	defer c.unlock()
	if _, err := os.Stat(s.path(thread)); errors.Is(err, fs.ErrNotExist) && s.hasFiles(thread) {
		return
	}
	if count, err := s.threadCount(c); err == nil && count > 0 {
		setThreadCount(c, count-1)
	}
}

// creation is one mutateOnce's or upload's reservation of a thread's
// place in the thread count (reserveThread): ended once (endCreation;
// another call may have reserved the thread since), and given back
// (releaseThread) unless the call created the thread, or counted nothing.
type creation struct {
	s       *File
	thread  string
	counted bool // reserveThread counted the thread
	upload  bool // an upload's (endAdoption)
	created bool // the call wrote the thread's first document, or its first upload
	ended   bool
}

// end lets the calls waiting for the thread's creation go, once: run
// before the thread's lock is let go of, so that a waiter then finds the
// document, or may create the thread itself.
func (c *creation) end() {
	if c.counted && !c.ended { // (only the call that counted the thread marked it)
		c.ended = true
		c.s.endCreation(c.thread)
	}
}

// finish ends the creation (if the thread's lock was never had) and gives
// back the reservation if the call created nothing.
func (c *creation) finish(ctx context.Context) {
	c.end()
	if c.counted && !c.created {
		c.s.releaseThread(ctx, c.thread)
	}
	if c.counted {
		c.s.reserving.Add(-1) // on disk, or given back (or left to an upload that adopted it)
	}
	if c.upload && !c.counted {
		c.s.endAdoption(ctx, c.thread, c.created)
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
type countFile struct {
	f  *os.File
	mu *sync.Mutex // File.countMu, held while locked
	// size is the file's length as threadCount last read it under this
	// lock, or -1 if unknown (not read, or longer than the count can be):
	// setThreadCount truncates the file only if its count is shorter.
	size *int
}

// lockCount takes the flock of .threads.lock, waiting up to LockTimeout.
// The file is kept open between locks (File.countF, guarded by countMu,
// which is held until unlock: a flock is per open file, so this
// process's lockers take turns on the mutex first): a lock then costs
// flock, fstat and flock, where opening the file each time added an
// openat, os.NewFile's fcntl and a close. Like a thread's lock file, it
// is checked once locked to be still linked (fstat), and reopened if
// not, so a lock on a file removed from under the store never stands
// for the one at the path.
func (s *File) lockCount(ctx context.Context) (countFile, error) {
	path := s.threadCountPath()
	s.countMu.Lock()
	for {
		if s.countF == nil {
			f, err := s.openLock("", path)
			if err != nil {
				s.countMu.Unlock()
				return countFile{}, err
			}
			s.countF = f
		}
		fd := int(s.countF.Fd())
		if err := flockWait(ctx, fd, path, s.opt.LockTimeout); err != nil {
			s.countMu.Unlock()
			return countFile{}, err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Flock(fd, syscall.LOCK_UN)
			s.countMu.Unlock()
			return countFile{}, s.unavailable("", &fs.PathError{Op: "fstat", Path: path, Err: err})
		}
		if st.Nlink > 0 {
			s.countSize = -1
			return countFile{s.countF, &s.countMu, &s.countSize}, nil
		}
		s.countF.Close() // removed: lets go of the lock; take the file at the path
		s.countF = nil
	}
}

// unlock lets go of the flock, and then of countMu.
func (c countFile) unlock() {
	syscall.Flock(int(c.f.Fd()), syscall.LOCK_UN)
	c.mu.Unlock()
}

// closeCount closes the kept .threads.lock (File.Close).
func (s *File) closeCount() {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	if s.countF != nil {
		s.countF.Close()
		s.countF = nil
	}
}

// threadCount reads the count, or recounts the folder if it does not read.
// One pread(2): a regular file's read returns all it has up to the
// buffer's size, and a count is shorter (os.File.ReadAt would read again
// to be told the end).
func (s *File) threadCount(c countFile) (int, error) {
	var buf [24]byte
	n := 0
	err := ignoringEINTR(func() (err error) { n, err = syscall.Pread(int(c.f.Fd()), buf[:], 0); return err })
	if err != nil {
		return 0, &fs.PathError{Op: "read", Path: c.f.Name(), Err: err}
	}
	*c.size = -1
	if n < len(buf) {
		*c.size = n
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(buf[:n]))); err == nil && n >= 0 {
		return n, nil
	}
	return s.countFolder(c)
}

// countFolder sets the count to the folder's threads (countedThreads)
// and the places this process's calls reserved and have not yet
// resolved (reserving: a thread whose document or folder is not written
// yet), and returns it; under createMu, so that no reservation is made
// meanwhile. Those are read before the folder: a call that resolved its
// place before, by writing its thread, shows in the folder; one that
// writes it after is counted twice, until the next recount (a place
// given back is given back under createMu, never meanwhile).
func (s *File) countFolder(c countFile) (int, error) {
	reserved := int(s.reserving.Load())
	names, err := s.countedThreads()
	if err != nil {
		return 0, err
	}
	n := len(names) + reserved
	setThreadCount(c, n)
	return n, nil
}

// setThreadCount writes the count in place, and cuts the file to it if
// the file was longer (or of unknown length): a creation's count is
// never shorter than the one it read, and an ftruncate(2) of an
// unchanged length is a journal handle on ext4 (about a tenth of a
// thread's creation there) and a folder watch event. A failure leaves a
// count that does not read, which is recounted.
func setThreadCount(c countFile, n int) {
	var buf [24]byte
	b := strconv.AppendInt(buf[:0], int64(n), 10)
	b = append(b, '\n')
	if _, err := c.f.WriteAt(b, 0); err != nil {
		*c.size = -1
		return
	}
	if *c.size < 0 || len(b) < *c.size {
		if c.f.Truncate(int64(len(b))) != nil {
			*c.size = -1
			return
		}
	}
	*c.size = len(b)
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
	_, err = s.countFolder(c)
	return err
}

// threadNames lists the threads that have a document.
func (s *File) threadNames() ([]string, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		if name, ok := threadOf(de); ok {
			names = append(names, name)
		}
	}
	return names, nil
}

// threadOf is the thread whose document de is, if it is one.
func threadOf(de os.DirEntry) (string, bool) {
	name, ok := strings.CutSuffix(de.Name(), ".json")
	return name, ok && de.Type().IsRegular() && chatrelay.ValidThread(name)
}

// countedThreads lists the threads the thread count counts: those that
// have a document or an attachments folder.
func (s *File) countedThreads() ([]string, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(des))
	var names []string
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".json")
		if ok && !de.Type().IsRegular() {
			continue
		}
		if !ok {
			if name, ok = strings.CutSuffix(de.Name(), ".files"); !ok || !de.IsDir() {
				continue
			}
		}
		if chatrelay.ValidThread(name) && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names, nil
}
