package filestore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestPostsMakeOnlyTheirDocumentsEvents: a process that follows the chat
// folder (every server, and the feed of each) reads each event in it. A
// post's temp file made beside the documents added three events to its
// rename's one (its creation, its write, its moved-from); in the temp
// folder it adds none, so a watcher of the chat folder sees only the
// documents' names while posts go on.
func TestPostsMakeOnlyTheirDocumentsEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "first")  // the thread's creation, before the watch
	appendText(t, s, threadA, "second") // and the first replace, which makes the temp folder
	chat := filepath.Join(dir, "chat")
	w, err := fsnotify.NewWatcher()
	assert.Success(t, err)
	defer w.Close()
	assert.Success(t, w.Add(chat))

	for i := range 20 {
		appendText(t, s, threadA, "post "+string(rune('a'+i)))
	}
	sentinel := filepath.Join(chat, "zz-sentinel")
	assert.Success(t, os.WriteFile(sentinel, nil, 0o600))

	var names []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.Events:
			if ev.Name == sentinel {
				assert.True(t, len(names) > 0, "no event of the posts' document reached the watch")
				for _, n := range names {
					assert.Equal(t, "an event's file", n, threadA+".json")
				}
				return
			}
			names = append(names, filepath.Base(ev.Name))
		case err := <-w.Errors:
			t.Fatalf("watch: %v", err)
		case <-timeout:
			t.Fatalf("the sentinel's event did not come in 10 s; events so far: %s", strings.Join(names, " "))
		}
	}
}

// TestATempFolderThatIsAFileLeavesTempsBeside: a chat folder whose
// ".tmp" is not a folder (a file made by hand) still takes posts, their
// temp files beside the documents as before the temp folder, and keeps
// the file as it was.
func TestATempFolderThatIsAFileLeavesTempsBeside(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	chat := filepath.Join(dir, "chat")
	assert.Success(t, os.MkdirAll(chat, 0o700))
	assert.Success(t, os.WriteFile(filepath.Join(chat, tempFolder), []byte("mine"), 0o600))
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "one")
	appendText(t, s, threadA, "two")
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", texts(p), []string{"one", "two"})
	b, err := os.ReadFile(filepath.Join(chat, tempFolder))
	assert.Success(t, err)
	assert.Equal(t, "the file .tmp", string(b), "mine")
}

// TestATempFolderRemovedByHandIsMadeAgain: posts go on after the temp
// folder was removed between them, into a new one.
func TestATempFolderRemovedByHandIsMadeAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "one")
	appendText(t, s, threadA, "two") // a replace: the temp folder is made
	tmp := filepath.Join(dir, "chat", tempFolder)
	fi, err := os.Stat(tmp)
	assert.Success(t, err)
	assert.True(t, fi.IsDir(), "the temp folder is not a folder")
	assert.Success(t, os.Remove(tmp))
	appendText(t, s, threadA, "three")
	appendText(t, s, threadA, "four")
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", texts(p), []string{"one", "two", "three", "four"})
	fi, err = os.Stat(tmp)
	assert.Success(t, err)
	assert.True(t, fi.IsDir(), "the temp folder was not made again")
}

// TestATempFolderReplacedAfterStartTakesPosts: a temp folder removed and
// replaced by a file while the store runs (by hand) does not fail the
// posts that follow (review11b: each answered 503 "not a directory" until
// a restart, while the readiness probe, which writes beside the
// documents, said ready): they are written beside the documents, and the
// file is left as it was.
func TestATempFolderReplacedAfterStartTakesPosts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "one")
	appendText(t, s, threadA, "two") // a replace: the temp folder is made
	tmp := filepath.Join(dir, "chat", tempFolder)
	assert.Success(t, os.Remove(tmp))
	assert.Success(t, os.WriteFile(tmp, []byte("mine"), 0o600))
	appendText(t, s, threadA, "three")
	appendText(t, s, threadA, "four")
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", texts(p), []string{"one", "two", "three", "four"})
	b, err := os.ReadFile(tmp)
	assert.Success(t, err)
	assert.Equal(t, "the file .tmp", string(b), "mine")
}

// TestATempFolderLooksAgainWithTheDescriptorItHolds: a write that fails
// in the temp folder (a full disk, a quota, EIO) makes the next write look
// at the folder again; the folder still there, it goes on with the
// descriptor it holds. Before, each look opened one more descriptor, kept
// until Close (review13: 50 failing posts on a full disk, 50 descriptors
// more, on the way to EMFILE). A write after Close names the folder by its
// path and holds nothing.
func TestATempFolderLooksAgainWithTheDescriptorItHolds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "one")
	appendText(t, s, threadA, "two") // a replace: the temp folder is made
	_, inUse := s.tempDir()
	for i := range 50 {
		s.tmpState.CompareAndSwap(tmpReady, tmpUnknown) // as a write that failed there
		appendText(t, s, threadA, fmt.Sprintf("after a failure %d", i))
	}
	held := func() int { // the descriptors of the temp folder s holds
		s.tmpMu.Lock()
		defer s.tmpMu.Unlock()
		return len(s.tmpFDs)
	}
	assert.Equal(t, "descriptors of the temp folder held", held(), 1)
	_, fd := s.tempDir()
	assert.Equal(t, "the descriptor in use", fd, inUse)

	// Removed and made again by hand: a new folder, a new descriptor.
	tmp := filepath.Join(dir, "chat", tempFolder)
	assert.Success(t, os.Remove(tmp))
	assert.Success(t, os.Mkdir(tmp, 0o700))
	s.tmpState.CompareAndSwap(tmpReady, tmpUnknown)
	appendText(t, s, threadA, "in the new folder")
	assert.Equal(t, "descriptors held after the folder was made again", held(), 2)

	assert.Success(t, s.Close())
	s.tmpState.CompareAndSwap(tmpReady, tmpUnknown)
	appendText(t, s, threadA, "after Close")
	assert.Equal(t, "descriptors held after Close", held(), 0)
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages kept", len(texts(p)), 54)
}
