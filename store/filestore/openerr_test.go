package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gofrs/flock"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestOpenFolderFaultsHaveACode: a data folder the store cannot use (a
// file in its place, a folder another server holds) is store_unavailable,
// the contract's code that the CLI's "chatrelay: …" line and an operator's
// script read; it was a bare error ("store: mkdir DATA: not a directory",
// "the data folder DATA is served by …"), which CodeOf calls internal.
func TestOpenFolderFaultsHaveACode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, serve := range []bool{false, true} {
		_, err := store.Open(ctx, "file:"+file, store.Options{Serve: serve, NoFsync: true})
		assert.Code(t, err, chatrelay.StoreUnavailable)
	}
	data := t.TempDir()
	first, err := store.Open(ctx, "file:"+data, store.Options{Serve: true, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = store.Open(ctx, "file:"+data, store.Options{Serve: true, NoFsync: true})
	assert.Code(t, err, chatrelay.StoreUnavailable)
}

// TestServeLockFailureNamesItself: a flock that fails (ENOLCK on an NFS
// without its lock daemon, EIO) is not another server: serve's error names
// the failure, still store_unavailable, and not "served by another
// process", which sent an operator looking for a server that was not
// there. Not parallel: it swaps tryLockServe.
func TestServeLockFailureNamesItself(t *testing.T) {
	defer func(old func(*flock.Flock) (bool, error)) { tryLockServe = old }(tryLockServe)
	tryLockServe = func(*flock.Flock) (bool, error) { return false, syscall.ENOLCK }
	data := t.TempDir()
	_, err := store.Open(context.Background(), "file:"+data, store.Options{Serve: true, NoFsync: true})
	assert.Code(t, err, chatrelay.StoreUnavailable)
	if !errors.Is(err, syscall.ENOLCK) {
		t.Errorf("error %q does not carry ENOLCK", err)
	}
	if strings.Contains(err.Error(), "served by") {
		t.Errorf("error %q blames another server for a lock that failed", err)
	}
	// The folder is left as a second try finds it: not locked.
	tryLockServe = (*flock.Flock).TryLock
	b, err := store.Open(context.Background(), "file:"+data, store.Options{Serve: true, NoFsync: true})
	if err != nil {
		t.Fatalf("after a failed lock the folder cannot be served: %v", err)
	}
	b.Close()
}
