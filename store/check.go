package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Checker is a Store that can say whether it takes writes right now. The
// server's readiness probe (GET /readyz) asks it; a Store that is not a
// Checker is taken as ready. A networked backend would ping its server.
type Checker interface {
	// Check returns an error if an Append would fail now for a reason
	// other than the message itself.
	Check(ctx context.Context) error
}

var _ Checker = (*File)(nil)

// probeSize is the least a readiness probe writes: about a thread
// document of a few dozen messages.
const probeSize = 8 << 10

// Check implements Checker: it writes a probe file of real bytes in the
// chat folder (at least probeSize, and as many as the last document whose
// write failed), syncs it as appends do, and removes it. That fails if the
// folder is gone, is not a folder, is on a read-only or full filesystem,
// or is not writable by this user. (An empty probe would not do: a full
// filesystem still has inodes for it; nor would access(W_OK), which says
// yes to root on a folder whose mode forbids writing.) Until a probe as
// large as the failed write succeeds, the failure of the last append
// stands. The probe's name (".probe-*") is never taken for a thread.
func (s *File) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	failed := s.lastFail.Load()
	size := probeSize
	if failed != nil {
		size = max(size, failed.size)
	}
	if err := s.probe(size); err != nil {
		return fmt.Errorf("store: check %s: %w", s.dir, err)
	}
	s.lastFail.CompareAndSwap(failed, nil)
	return nil
}

func (s *File) probe(size int) error {
	f, err := os.CreateTemp(s.dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	defer os.Remove(name)
	_, err = f.Write(make([]byte, size))
	if err == nil && !s.opt.NoFsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	return err
}

// writeFailure is an append whose write failed: a readiness probe must
// write as much before the store counts as writable again.
type writeFailure struct {
	size int
	err  error
}

// Reason says in a few words, with no path, why a store error happened:
// "disk full", "read-only filesystem"…; "" for nil.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.ENOSPC):
		return "disk full"
	case errors.Is(err, syscall.EDQUOT):
		return "disk quota exceeded"
	case errors.Is(err, syscall.EROFS):
		return "read-only filesystem"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "permission denied"
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return "data folder missing"
	case errors.Is(err, syscall.EIO):
		return "input/output error"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	return "not writable"
}
