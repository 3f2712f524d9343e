package store

import (
	"context"
	"errors"
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

// Reason says in a few words, with no path, why a store error happened:
// "disk full", "read-only filesystem"…, or the words of an error that has
// a StoreReason method (a Redis that refuses writes: "Redis out of
// memory"); "" for nil.
func Reason(err error) string {
	var own interface{ StoreReason() string }
	switch {
	case err == nil:
		return ""
	case errors.As(err, &own):
		return own.StoreReason() // a backend's own words ("Redis out of memory")
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

// Partial reports whether err (a Check's) says that part of the store
// does not answer while the rest, and what every node needs, takes
// writes: a Redis instance of several (an error with a StorePartial
// method that says so). Its threads answer 503 on every node alike while
// the others' go on, so the server stays ready (GET /readyz answers 200
// with "store":"partial"), as for a full store.
func Partial(err error) bool {
	var own interface{ StorePartial() bool }
	return errors.As(err, &own) && own.StorePartial()
}

// Full reports whether err (a Check's) says the store is full: the file
// store's filesystem is full or over its quota, or Redis is at its
// maxmemory with noeviction (an error with a StoreFull method that says
// so). A full store refuses every write, from every node alike, while its
// reads (polls, streams) go on: the server stays ready (GET /readyz
// answers 200 with "store":"full"), since no node would do better and
// taking them all out of rotation would stop those reads too.
func Full(err error) bool {
	var own interface{ StoreFull() bool }
	switch {
	case err == nil:
		return false
	case errors.As(err, &own):
		return own.StoreFull()
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
