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
	s, err := filestore.OpenFile(dir, filestore.FileOptions{Log: slog.New(slog.DiscardHandler)})
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
