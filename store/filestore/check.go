package filestore

import (
	"context"
	"fmt"
	"os"

	"github.com/chatrelay/chatrelay/store"
)

var _ store.Checker = (*File)(nil)

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
