package filestore

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
			fail := failFolderSync(s)
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

// TestReplaceWhoseFolderSyncFails: a post to a thread that has a document,
// whose folder fsync fails after the new document replaced the old one,
// is refused and leaves nothing behind: the thread, read through this
// store and from the file as another process would, holds what it held
// before. Before the fix the refused message stayed in the document, and
// a v1 client retrying the 503 posted it twice.
func TestReplaceWhoseFolderSyncFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenFile(dir, FileOptions{Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { s.Close() })
	fail := failFolderSync(s)

	appendText(t, s, threadA, "the first")
	fail.Store(true)
	_, err = s.Append(t.Context(), threadA, store.NewMessage{Author: chatrelay.Operator, Text: "not durable"})
	assert.Code(t, err, chatrelay.StoreUnavailable)
	assert.True(t, errors.Is(err, syscall.EIO), "the cause: %v", err)
	fail.Store(false)

	assert.Equal(t, "the thread after the refused post", texts(mustSince(t, s, threadA)), []string{"the first"})
	other, err := OpenFile(dir, FileOptions{Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer other.Close()
	assert.Equal(t, "the thread, read by another opener", texts(mustSince(t, other, threadA)), []string{"the first"})

	appendText(t, s, threadA, "the second")
	assert.Equal(t, "the thread", texts(mustSince(t, s, threadA)), []string{"the first", "the second"})
}

// TestRecordWhoseFolderSyncFails: an invite, a second invite, a push
// subscription and an agent key whose record's folder fsync fails after
// the new record replaced the old one (or was made) are refused and leave
// nothing behind: the grants, subscriptions and keys are those before, so
// a refused invite or key takes no place in a limit. Before the fix each
// stayed stored.
func TestRecordWhoseFolderSyncFails(t *testing.T) {
	t.Parallel()
	s, err := OpenFile(t.TempDir(), FileOptions{Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { s.Close() })
	fail := failFolderSync(s)
	ctx := t.Context()
	grant := func(id string) chatrelay.Grant {
		return chatrelay.Grant{ID: id, Name: "Jo", Kind: chatrelay.Human, Role: chatrelay.Viewer, CreatedAt: 1,
			ExpiresAt: time.Now().Add(time.Hour).UnixMilli(), Digest: strings.Repeat("0f", 31) + id[len(id)-2:]}
	}
	ids := func(gs []chatrelay.Grant) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.ID)
		}
		return out
	}
	appendText(t, s, threadA, "hello")

	refused := func(what string, err error) {
		t.Helper()
		assert.Code(t, err, chatrelay.StoreUnavailable)
		assert.True(t, errors.Is(err, syscall.EIO), "%s: the cause: %v", what, err)
	}
	fail.Store(true)
	refused("the first invite", s.Invite(ctx, threadA, grant("p_0011aabb")))
	fail.Store(false)
	gs, err := s.Grants(ctx, threadA)
	assert.Success(t, err)
	assert.Equal(t, "grants after a refused first invite", ids(gs), []string(nil))
	_, err = os.Stat(s.participantsPath(threadA))
	assert.True(t, errors.Is(err, os.ErrNotExist), "the refused first invite left its record: %v", err)

	assert.Success(t, s.Invite(ctx, threadA, grant("p_0011aacc")))
	fail.Store(true)
	refused("a second invite", s.Invite(ctx, threadA, grant("p_0011aadd")))
	fail.Store(false)
	gs, err = s.Grants(ctx, threadA)
	assert.Success(t, err)
	assert.Equal(t, "grants after a refused second invite", ids(gs), []string{"p_0011aacc"})

	fail.Store(true)
	sub := chatrelay.PushSubscription{ID: chatrelay.NewPushID(), Endpoint: "https://push.example.com/ep/1",
		P256dh: base64.RawURLEncoding.EncodeToString(append([]byte{4}, make([]byte, 64)...)), Auth: base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
		Events: chatrelay.PushEvents, CreatedAt: 1, Subscriber: chatrelay.SubscriberOwner}
	_, _, err = s.PushSubscribe(ctx, threadA, sub)
	refused("a push subscription", err)
	fail.Store(false)
	subs, err := s.PushSubscriptions(ctx, threadA)
	assert.Success(t, err)
	assert.Equal(t, "subscriptions after a refused one", len(subs), 0)

	fail.Store(true)
	refused("an agent key", s.AddAgent(ctx, chatrelay.AgentKey{ID: "a_0123abcd", Name: "bot", CreatedAt: 1, Digest: strings.Repeat("ab", 32)}))
	fail.Store(false)
	keys, err := s.AgentKeys(ctx)
	assert.Success(t, err)
	assert.Equal(t, "agent keys after a refused one", len(keys), 0)
}

// failFolderSync makes s's folder fsyncs fail with EIO while the flag it
// returns is set.
func failFolderSync(s *File) *atomic.Bool {
	fail := new(atomic.Bool)
	s.dsync.mu.Lock() // the syncer reads fsyncFn after taking mu
	s.dsync.fsyncFn = func() error {
		if fail.Load() {
			return &os.PathError{Op: "sync", Path: s.dsync.dir, Err: syscall.EIO}
		}
		return s.dsync.fsync()
	}
	s.dsync.mu.Unlock()
	return fail
}
