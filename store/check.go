package store

import (
	"context"
	"fmt"
	"os"
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

// Check implements Checker: it creates and removes an empty probe file in
// the chat folder, which fails if the folder is gone, is not a folder, is
// on a read-only or full filesystem, or is not writable by this user. (An
// access(W_OK) test would not do: it says yes to root on a folder whose
// mode forbids writing, and knows nothing of a missing folder's mount.)
// The probe's name (".probe-*") is never taken for a thread.
func (s *File) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("store: check %s: %w", s.dir, err)
	}
	name := f.Name()
	err = f.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("store: check %s: %w", s.dir, err)
	}
	return nil
}
