package filestore_test

// The file store on a full disk (issue #19): a write that fails for want
// of space leaves nothing half written behind.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
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

const diskThread = "a1b2c3d4e5f60718"

func openOn(t *testing.T, dir string) *filestore.File {
	t.Helper()
	return openWith(t, dir, filestore.FileOptions{})
}

// openWith is openOn with options.
func openWith(t *testing.T, dir string, opt filestore.FileOptions) *filestore.File {
	t.Helper()
	opt.Log = slog.New(slog.DiscardHandler)
	s, err := filestore.OpenFile(dir, opt)
	assert.Success(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestAuditAfterAFullDisk: on a full disk an audit line is refused where
// the audit file's last block has room for part of it. Once space is
// freed, the next event (a revoke) is read back: before the fix the half
// line was left, the revoke was appended to it, and the audit no longer
// showed it.
func TestAuditAfterAFullDisk(t *testing.T) {
	t.Parallel()
	dir := storetest.SmallDisk(t, 1<<20)
	s := openOn(t, dir)
	ctx := context.Background()
	_, err := s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "hello"})
	assert.Success(t, err)
	refused := chatrelay.AuditEvent{Event: chatrelay.AuditRefused, Participant: "p_0011aabb", Code: chatrelay.TokenRevoked, IP: "192.0.2.1"}
	line, _ := json.Marshal(refused)
	path := filepath.Join(dir, "chat", diskThread+".audit.jsonl")
	// Events until the next line would not fit in the file's last page.
	for i := int64(1); ; i++ {
		refused.At = i
		assert.Success(t, s.Audit(ctx, diskThread, refused))
		fi, err := os.Stat(path)
		assert.Success(t, err)
		if room := 4096 - fi.Size()%4096; room < int64(len(line))-5 && room > 5 {
			break
		}
	}
	before, err := s.AuditLog(ctx, diskThread)
	assert.Success(t, err)

	free := storetest.FillDisk(t, dir, 0)
	refused.At = 1e6
	err = s.Audit(ctx, diskThread, refused)
	assert.Code(t, err, chatrelay.StoreUnavailable)
	free()

	revoked := chatrelay.AuditEvent{At: 2e6, Event: chatrelay.AuditRevoked, Participant: "p_0011aabb"}
	assert.Success(t, s.Audit(ctx, diskThread, revoked))
	events, err := s.AuditLog(ctx, diskThread)
	assert.Success(t, err)
	assert.Equal(t, "events after the full disk", len(events), len(before)+1)
	assert.Equal(t, "the newest two", events[len(events)-2:], []chatrelay.AuditEvent{before[len(before)-1], revoked})
	data, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.True(t, bytes.Count(data, []byte{'\n'}) == len(events) && bytes.HasSuffix(data, []byte("}\n")),
		"the file is not whole lines of events: %q", data[max(0, len(data)-300):])
}

// TestFailedWriteGivesBackItsRoom: a message refused because the disk is
// full gives back the room its write had taken (and its descriptor) at
// once: before the fix the temp file was removed but left open, so its
// blocks stayed taken until the garbage collector closed it, and the
// next small write failed too.
func TestFailedWriteGivesBackItsRoom(t *testing.T) {
	t.Parallel()
	dir := storetest.SmallDisk(t, 1<<20)
	s := openOn(t, dir)
	ctx := context.Background()
	_, err := s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: strings.Repeat("🪐", chatrelay.MaxText)})
	assert.Success(t, err)
	free := storetest.FillDisk(t, dir, 3*4096)
	defer free()
	for range 3 {
		_, err = s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "no room for the document"})
		assert.Code(t, err, chatrelay.StoreUnavailable)
	}
	assert.Success(t, os.WriteFile(filepath.Join(dir, "room"), make([]byte, 3*4096), 0o600))
}

// TestFailedLogAppendLeavesNothing: a message refused because the disk
// filled up in the middle of its line in the thread's log (AppendLog)
// leaves no part of the line behind. Before the fix the part written
// stayed, the next message's line was appended to it, and the thread no
// longer read.
func TestFailedLogAppendLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := storetest.SmallDisk(t, 1<<20)
	s := openWith(t, dir, filestore.FileOptions{AppendLog: true})
	ctx := context.Background()
	text := strings.Repeat("a line of the log ", 60)
	m := store.NewMessage{Author: chatrelay.Operator, Text: text}
	_, err := s.Append(ctx, diskThread, m) // the document
	assert.Success(t, err)
	path := filepath.Join(dir, "chat", diskThread+".log")
	for sent := 1; ; sent++ { // lines until the next would not fit in the log's last page
		_, err := s.Append(ctx, diskThread, m)
		assert.Success(t, err)
		fi, err := os.Stat(path)
		assert.Success(t, err)
		if room := 4096 - fi.Size()%4096; room < int64(len(text))-5 && room > 5 {
			break
		}
		assert.True(t, sent < 10, "no log size found with part of a line's room")
	}
	before, err := s.Since(ctx, diskThread, 0, 0)
	assert.Success(t, err)
	logBefore, err := os.ReadFile(path)
	assert.Success(t, err)

	free := storetest.FillDisk(t, dir, 0)
	_, err = s.Append(ctx, diskThread, m)
	assert.Code(t, err, chatrelay.StoreUnavailable)
	free()
	logNow, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.True(t, bytes.Equal(logNow, logBefore), "the refused line left %d bytes", len(logNow)-len(logBefore))

	_, err = s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "after the full disk"})
	assert.Success(t, err)
	fresh := openOn(t, dir) // no cache: from the files
	after, err := fresh.Since(ctx, diskThread, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", len(after.Messages), len(before.Messages)+1)
	assert.Equal(t, "the newest", after.Messages[len(after.Messages)-1].Text, "after the full disk")
}

// TestFailedFirstLogAppendLeavesNoLog: the first message to go to a
// thread's log (AppendLog), refused because the disk is full, leaves no
// log behind: the refused post made it, so it goes with the post. Before
// the fix an empty <thread>.log stayed (seen with the server and with
// chatrelay reply on a full tmpfs).
func TestFailedFirstLogAppendLeavesNoLog(t *testing.T) {
	t.Parallel()
	dir := storetest.SmallDisk(t, 1<<20)
	s := openWith(t, dir, filestore.FileOptions{AppendLog: true})
	ctx := context.Background()
	m := store.NewMessage{Author: chatrelay.Operator, Text: "hello"}
	_, err := s.Append(ctx, diskThread, m) // the document
	assert.Success(t, err)
	path := filepath.Join(dir, "chat", diskThread+".log")

	free := storetest.FillDisk(t, dir, 0)
	_, err = s.Append(ctx, diskThread, m)
	assert.Code(t, err, chatrelay.StoreUnavailable)
	_, err = os.Stat(path)
	assert.True(t, os.IsNotExist(err), "the refused post left its log: %v", err)
	free()

	_, err = s.Append(ctx, diskThread, store.NewMessage{Author: chatrelay.Operator, Text: "after the full disk"})
	assert.Success(t, err)
	fresh := openOn(t, dir) // no cache: from the files
	after, err := fresh.Since(ctx, diskThread, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", len(after.Messages), 2)
	assert.Equal(t, "the newest", after.Messages[1].Text, "after the full disk")
}
