package filestore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// TestRefusedUploadLeavesNoFolder: an upload whose bytes fit on the disk
// but whose index does not is refused (store_unavailable) and leaves
// nothing: no file, and no attachments folder of the thread either.
func TestRefusedUploadLeavesNoFolder(t *testing.T) {
	t.Parallel()
	dir := storetest.SmallDisk(t, 1<<20)
	s := openOn(t, dir)
	ctx := context.Background()
	_, err := s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "hello"})
	assert.Success(t, err)
	before := storetest.Files(t, dir)
	free := storetest.FillDisk(t, dir, 8192) // room for the upload's bytes, none for its index
	_, err = s.PutAttachment(ctx, diskThread, store.Upload{Name: "a.bin", Body: bytes.NewReader(bytes.Repeat([]byte("x"), 8000))})
	assert.Code(t, err, chatrelay.StoreUnavailable)
	free()
	assert.Equal(t, "files after the refused upload", storetest.Files(t, dir), before)
	_, err = os.Stat(filepath.Join(dir, "chat", diskThread+".files"))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "the thread's attachments folder after the refused upload: %v", err)
}

// TestOpenAttachmentSeesAnotherProcess: a download reads the index as it
// is on disk, not as this process last parsed it: an upload made through
// another store on the same folder (the host CLI, say) is found.
func TestOpenAttachmentSeesAnotherProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := openOn(t, dir), openOn(t, dir)
	ctx := context.Background()
	_, err := a.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "hello"})
	assert.Success(t, err)
	first, err := a.PutAttachment(ctx, diskThread, store.Upload{Name: "one.txt", Body: strings.NewReader("one")})
	assert.Success(t, err)
	_, f, err := a.OpenAttachment(ctx, diskThread, first.ID, "")
	assert.Success(t, err)
	f.Close()
	second, err := b.PutAttachment(ctx, diskThread, store.Upload{Name: "two.txt", Body: strings.NewReader("two")})
	assert.Success(t, err)
	got, f, err := a.OpenAttachment(ctx, diskThread, second.ID, "")
	assert.Success(t, err)
	data, err := io.ReadAll(f)
	f.Close()
	assert.Success(t, err)
	assert.Equal(t, "the other store's upload", got.Name+": "+string(data), "two.txt: two")
}

// uploadTemps is how many uploads' temp files s's folder holds.
func uploadTemps(t *testing.T, s *filestore.File) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(s.Dir(), ".*.upload.tmp-*"))
	assert.Success(t, err)
	return len(m)
}

// TestDuplicateDroppedThroughWork: an upload whose bytes the thread holds
// already is dropped at its commit, and its temp file is removed through
// up.Work, as its bytes were written: freeing a large file's pages is the
// kernel's work on the thread that removes it, which the server runs on
// its low-priority lane, not on the request's thread beside the posts.
func TestDuplicateDroppedThroughWork(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openOn(t, dir)
	ctx := context.Background()
	_, err := s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "hello"})
	assert.Success(t, err)
	temps := func() int { return uploadTemps(t, s) }
	removedInWork := 0
	work := func(w func()) error {
		before := temps()
		w()
		if temps() < before {
			removedInWork++
		}
		return nil
	}
	body := strings.Repeat("the same bytes ", 1<<16)
	a, err := s.PutAttachment(ctx, diskThread, store.Upload{Name: "a.txt", Body: strings.NewReader(body), Work: work})
	assert.Success(t, err)
	b, err := s.PutAttachment(ctx, diskThread, store.Upload{Name: "b.txt", Body: strings.NewReader(body), Work: work})
	assert.Success(t, err)
	assert.Equal(t, "the two uploads' digests", b.SHA256, a.SHA256)
	assert.Equal(t, "temp files removed through up.Work", removedInWork, 1)
	assert.Equal(t, "temp files left", temps(), 0)
}

// TestDuplicateAnsweredBeforeItsRemoval: a duplicate upload is answered
// while the lane its temp file's removal runs on is busy: the removal is
// handed to up.After, which runs it after the answer (before, the answer
// waited for a turn of the lane behind the other uploads' chunks). The
// temp file is gone once the work ran.
func TestDuplicateAnsweredBeforeItsRemoval(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openOn(t, dir)
	ctx := context.Background()
	_, err := s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "hello"})
	assert.Success(t, err)
	temps := func() int { return uploadTemps(t, s) }
	body := "the same bytes, one chunk"
	a, err := s.PutAttachment(ctx, diskThread, store.Upload{Name: "a.txt", Body: strings.NewReader(body)})
	assert.Success(t, err)

	busy := make(chan struct{}) // the lane, busy with other uploads until closed
	defer close(busy)
	calls := 0
	work := func(w func()) error { // the chunk's turn at once, any other after the lane is free
		if calls++; calls > 1 {
			<-busy
		}
		w()
		return nil
	}
	var later []func()
	after := func(w func()) { later = append(later, w) }
	done := make(chan error, 1)
	go func() {
		b, err := s.PutAttachment(ctx, diskThread, store.Upload{Name: "b.txt", Body: strings.NewReader(body), Work: work, After: after})
		if err == nil && b.SHA256 != a.SHA256 {
			err = errors.New("another digest: " + b.SHA256)
		}
		done <- err
	}()
	assert.Success(t, assert.Receive(t, done, "the duplicate's answer, which waited for a turn of the busy lane"))
	assert.Equal(t, "temp files before the work after the answer", temps(), 1)
	assert.Equal(t, "works after the answer", len(later), 1)
	later[0]()
	assert.Equal(t, "temp files left", temps(), 0)
}
