package filestore

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestCreateLeavesOnlyTheDocument: a thread's first document, with and
// without fsync, is the whole document at its name, 0600, and nothing
// else is left in the folder (no temp file); a name that exists already
// (a writer that takes no lock put it there) is not written over by the
// creation, which leaves it to the rename's way, and the store still
// writes the document there.
func TestCreateLeavesOnlyTheDocument(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("O_TMPFILE is Linux's")
	}
	for _, sync := range []bool{false, true} {
		dir := t.TempDir()
		var ds *dirSync
		if sync {
			ds = newDirSync(dir)
		}
		doc := []byte(`{"a document":true}`)
		fd, id, how, err := createFD(dir, threadA+".json", doc, ds)
		assert.Success(t, err)
		assert.Equal(t, "created", how, created)
		var st syscall.Stat_t
		assert.Success(t, syscall.Fstat(fd, &st))
		assert.Equal(t, "the identity of the descriptor returned", identityOf(&st), id)
		syscall.Close(fd)
		got, err := os.ReadFile(filepath.Join(dir, threadA+".json"))
		assert.Success(t, err)
		assert.Equal(t, "the document", string(got), string(doc))
		fi, err := os.Stat(filepath.Join(dir, threadA+".json"))
		assert.Success(t, err)
		assert.Equal(t, "its mode", fi.Mode().Perm(), os.FileMode(0o600))
		names, err := filepath.Glob(filepath.Join(dir, "*"))
		assert.Success(t, err)
		hidden, err := filepath.Glob(filepath.Join(dir, ".*"))
		assert.Success(t, err)
		assert.Equal(t, "the folder", append(names, hidden...), []string{filepath.Join(dir, threadA+".json")})

		fd, _, how, err = createFD(dir, threadA+".json", []byte("another"), ds)
		assert.Success(t, err)
		assert.Equal(t, "a creation over an existing file", how, notHere)
		assert.Equal(t, "its descriptor", fd, -1)
		got, err = os.ReadFile(filepath.Join(dir, threadA+".json"))
		assert.Success(t, err)
		assert.Equal(t, "the document left as it was", string(got), string(doc))
		if ds != nil {
			ds.close()
		}
	}

	// Through the store: the thread's document put there by hand after
	// the store found none is written over (the rename's way).
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	assert.Success(t, os.MkdirAll(filepath.Join(dir, "chat"), 0o700))
	assert.Success(t, os.WriteFile(s.path(threadB), []byte("by hand"), 0o600))
	pin, _, err := s.write(threadB, []byte(`{"the store's":true}`), true)
	assert.Success(t, err)
	pin.Close()
	got, err := os.ReadFile(s.path(threadB))
	assert.Success(t, err)
	assert.Equal(t, "the document", string(got), `{"the store's":true}`)
	assert.True(t, !s.noTmpfile.Load(), "one creation over an existing file turned O_TMPFILE off")
}
