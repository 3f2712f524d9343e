package filestore

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestCreationWhoseFolderSyncFails: a thread's first post whose folder
// fsync fails after the document got its name (linked from O_TMPFILE, or
// renamed from a temp file) is refused, and leaves nothing behind: no
// document, no lock file, no place in the thread count. The store then
// still holds the thread limit: before the fix the document stayed while
// its place was given back, and a third thread went past a limit of two.
func TestCreationWhoseFolderSyncFails(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"O_TMPFILE", "rename"} {
		t.Run(how, func(t *testing.T) {
			if how == "O_TMPFILE" && runtime.GOOS != "linux" {
				t.Skip("O_TMPFILE is Linux's")
			}
			dir := t.TempDir()
			s, err := OpenFile(dir, FileOptions{MaxThreads: 2, Log: slog.New(slog.DiscardHandler)})
			assert.Success(t, err)
			t.Cleanup(func() { s.Close() })
			s.noTmpfile.Store(how == "rename")
			var fail atomic.Bool
			s.dsync.mu.Lock() // the syncer reads fsyncFn after taking mu
			s.dsync.fsyncFn = func() error {
				if fail.Load() {
					return &os.PathError{Op: "sync", Path: s.dsync.dir, Err: syscall.EIO}
				}
				return s.dsync.fsync()
			}
			s.dsync.mu.Unlock()
			countPath := filepath.Join(dir, "chat", ".threads.lock")

			appendText(t, s, threadA, "the first thread")
			fail.Store(true)
			_, err = s.Append(t.Context(), threadB, store.NewMessage{Author: chatrelay.Operator, Text: "not durable"})
			assert.Code(t, err, chatrelay.StoreUnavailable)
			assert.True(t, errors.Is(err, syscall.EIO), "the cause: %v", err)
			fail.Store(false)

			for _, p := range []string{s.path(threadB), s.path(threadB) + ".lock"} {
				_, err := os.Stat(p)
				assert.True(t, errors.Is(err, os.ErrNotExist), "the refused creation left %s: %v", filepath.Base(p), err)
			}
			assert.Equal(t, "the refused post in the thread", texts(mustSince(t, s, threadB)), []string(nil))
			data, err := os.ReadFile(countPath)
			assert.Success(t, err)
			assert.Equal(t, "the count after the refused creation", string(data), "1\n")

			appendText(t, s, threadB, "the second thread")
			assert.Equal(t, "the thread", texts(mustSince(t, s, threadB)), []string{"the second thread"})
			_, err = s.Append(t.Context(), "00000000000000ff", store.NewMessage{Author: chatrelay.Operator, Text: "a third"})
			assert.Code(t, err, chatrelay.ThreadLimit)
			data, err = os.ReadFile(countPath)
			assert.Success(t, err)
			assert.Equal(t, "the count", string(data), "2\n")
		})
	}
}
