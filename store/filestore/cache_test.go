package filestore

import (
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestUnpinnedWrittenDocumentIsNotParsedAgain: a document this process
// wrote is cached without the checksum of its bytes (it is computed from
// the document when a read needs it); once its pin is taken back, a read
// of the unchanged file still finds the bytes the cached document's and
// parses nothing.
func TestUnpinnedWrittenDocumentIsNotParsedAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{MaxOpenDocs: 1})
	appendText(t, s, threadA, "one")
	appendText(t, s, threadA, "two")
	ta := s.peek(threadA)
	written := ta.snap.Load()
	assert.True(t, written != nil && written.written, "the append cached what it wrote")
	appendText(t, s, threadB, "other") // unpins threadA's document
	assert.True(t, ta.snap.Load().pin == nil, "threadA's document is still pinned")

	assert.Equal(t, "texts", texts(mustSince(t, s, threadA)), []string{"one", "two"})
	read := ta.snap.Load()
	assert.True(t, read.pin != nil && read.id == written.id, "the read did not pin the file it read")
	assert.True(t, &read.doc.msgs[0] == &written.doc.msgs[0], "the read parsed the unchanged document again")
}
