package filestore

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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
