package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/chatrelay/chatrelay"
)

// The locks: a thread's in-process mutex, then an exclusive flock on its
// sidecar <thread>.json.lock, kept open between writes (lockState); other
// processes take the same lock with gofrs/flock (lockPath).

// lockLoad is lockState, then the thread's snapshot loaded under the lock
// (nil: no document), now that no other process writes. On an error
// nothing stays locked.
func (s *File) lockLoad(ctx context.Context, thread string) (*threadState, *snapshot, func(), error) {
	return s.lockLoadLogged(ctx, thread, nil)
}

// lockLoadLogged is lockLoad that, for a thread with no document, sets
// *hasLog to whether it has a log (loadLogged).
func (s *File) lockLoadLogged(ctx context.Context, thread string, hasLog *bool) (*threadState, *snapshot, func(), error) {
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return nil, nil, nil, err
	}
	snap, err := s.loadLogged(thread, t, hasLog)
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return t, snap, unlock, nil
}

// lockState locks a thread against this process's other goroutines
// (t.mu) and other processes (lockThread), and returns its state and the
// one function that unlocks both.
//
// Both waits together take at most LockTimeout: behind a writer of this
// process that waits for another process's lock, a post waits with it,
// not after it (each waiter its own LockTimeout, once in line and again
// at the flock, made a queue of n posts wait up to n × LockTimeout).
func (s *File) lockState(ctx context.Context, thread string) (*threadState, func(), error) {
	t := s.state(thread)
	if !t.mu.TryLock() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opt.LockTimeout)
		defer cancel()
		if err := t.mu.lock(ctx); err != nil {
			return nil, nil, busy(s.path(thread)+".lock", err)
		}
	}
	fd, err := s.lockThread(ctx, t, thread)
	if err != nil {
		t.mu.Unlock()
		return nil, nil, err
	}
	if s.opt.TidyTemps && !t.tidied {
		t.tidied = true
		s.removeTemps(thread) // under the thread's lock: none is a live writer's
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
			t.closeLog()
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
	// The path is joined only when it is used: to open the file, to wait
	// for another holder, or for an error (a post's lock is free, and its
	// file open).
	lockPath := func() string { return s.path(thread) + ".lock" }
	for {
		if t.lockf == nil {
			fd, err := s.openLockFD(thread, lockPath())
			if err != nil {
				return -1, err
			}
			// A bare descriptor: no os.NewFile (its fcntl); closed as the pin is.
			t.lockf = &fdPin{fd}
			s.pins.add(t, s.opt.MaxOpenDocs) // its descriptor is bounded with the pinned documents'
		}
		fd := t.lockf.fd
		if err := flockNB(fd); err != nil {
			if err := flockWait(ctx, fd, lockPath(), s.opt.LockTimeout); err != nil {
				return -1, err
			}
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Flock(fd, syscall.LOCK_UN)
			return -1, s.unavailable(thread, &fs.PathError{Op: "fstat", Path: lockPath(), Err: err})
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
	fd, err := s.openLockFD(thread, path)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openLockFD is openLock's bare descriptor (a thread's lock file: see
// lockThread).
func (s *File) openLockFD(thread, path string) (int, error) {
	var fd int
	err := s.withFDs(func() (err error) {
		fd, err = syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return -1, s.unavailable(thread, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	return fd, nil
}

// flockWait takes an exclusive flock on fd, the open file path, waiting up
// to timeout: StoreUnavailable ("busy") if it cannot be had.
func flockWait(ctx context.Context, fd int, path string, timeout time.Duration) error {
	busy := func(err error) error { return busy(path, err) }
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

// busy is the error of a lock (on the lock file path) not had in time.
func busy(path string, err error) error {
	return &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store is busy", Retry: time.Second, Err: fmt.Errorf("lock %s: %w", filepath.Base(path), err)}
}

// threadMu is a thread's in-process lock: a mutex whose wait can end
// with a context (lockState), as the flock's does.
type threadMu struct{ c chan struct{} }

func newThreadMu() threadMu { return threadMu{make(chan struct{}, 1)} }

func (m threadMu) Lock()   { m.c <- struct{}{} }
func (m threadMu) Unlock() { <-m.c }

// TryLock takes the lock if it is free.
func (m threadMu) TryLock() bool {
	select {
	case m.c <- struct{}{}:
		return true
	default:
		return false
	}
}

// lock takes the lock, or answers ctx's error if ctx ends first.
func (m threadMu) lock(ctx context.Context) error {
	select {
	case m.c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
