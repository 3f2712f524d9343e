package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

var t0 = time.Date(2026, 10, 23, 18, 40, 0, 123e6, time.UTC)

const (
	threadA = "a1b2c3d4e5f60718"
	threadB = "0123456789abcdef"
)

// openFile opens a store in dir (a new temp dir if "") without fsync.
func openFile(t testing.TB, dir string, opt FileOptions) *File {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	opt.NoFsync = true
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	s, err := OpenFile(dir, opt)
	assert.Success(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func appendText(t testing.TB, s store.Store, thread, text string) store.Entry {
	t.Helper()
	e, err := s.Append(context.Background(), thread, store.NewMessage{Author: chatrelay.Operator, Text: text})
	assert.Success(t, err)
	return e
}

func texts(p store.Page) []string {
	var out []string
	for _, e := range p.Messages {
		out = append(out, e.Text)
	}
	return out
}

// readThread parses the thread's document and log straight from disk.
func readThread(t testing.TB, dir, thread string) ([]store.Entry, int64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "chat", thread+".json"))
	assert.Success(t, err)
	d, err := parseDocument(data, thread)
	assert.Success(t, err)
	logData, err := os.ReadFile(filepath.Join(dir, "chat", thread+".log"))
	if !errors.Is(err, fs.ErrNotExist) {
		assert.Success(t, err)
	}
	logged, _, err := parseLog(logData)
	assert.Success(t, err)
	d, err = withLog(d, logged)
	assert.Success(t, err)
	return d.msgs, d.trimmed
}

func TestAppendAssignsEpochIDAndTS(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	s := openFile(t, "", FileOptions{Now: clk.Now})

	e1 := appendText(t, s, threadA, "one")
	e2 := appendText(t, s, threadA, "two") // same millisecond
	clk.Advance(-time.Hour)                // the clock steps back
	e3 := appendText(t, s, threadA, "three")

	assert.Equal(t, "epochs", []int64{e1.Epoch, e2.Epoch, e3.Epoch}, []int64{t0.UnixMilli(), t0.UnixMilli() + 1, t0.UnixMilli() + 2})
	assert.Equal(t, "ts", e1.TS, "2026-10-23T18:40:00+00:00")
	assert.Equal(t, "author defaults", e1.Author, chatrelay.Operator)
	assert.True(t, strings.HasPrefix(e1.ID, "MSG-20261023-184000-"), "id %q", e1.ID)
	assert.True(t, e1.ID != e2.ID && e2.ID != e3.ID && e1.ID != e3.ID, "ids repeat: %s %s %s", e1.ID, e2.ID, e3.ID)
	assert.Equal(t, "entry JSON", string(e1.JSON), string(chatrelay.MarshalMessage(e1.Message)))
}

func TestAppendRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		thread string
		msg    store.NewMessage
		want   chatrelay.Code
	}{
		{"empty text", threadA, store.NewMessage{Text: ""}, chatrelay.InvalidText},
		{"blank text", threadA, store.NewMessage{Text: " \n\t"}, chatrelay.InvalidText},
		{"invalid UTF-8", threadA, store.NewMessage{Text: "a\xffb"}, chatrelay.InvalidText},
		{"text too long", threadA, store.NewMessage{Text: strings.Repeat("é", chatrelay.MaxText+1)}, chatrelay.TextTooLong},
		{"bad thread id", "../../etc/passwd", store.NewMessage{Text: "hi"}, chatrelay.InvalidThread},
		{"upper-case thread id", "A1B2C3D4E5F60718", store.NewMessage{Text: "hi"}, chatrelay.InvalidThread},
		{"reply to a missing thread", threadA, store.NewMessage{Author: chatrelay.Hermes, Text: "hi", MustExist: true}, chatrelay.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{})
			_, err := s.Append(t.Context(), tt.thread, tt.msg)
			assert.Code(t, err, tt.want)
			des, err := os.ReadDir(filepath.Join(dir, "chat"))
			assert.Success(t, err)
			assert.Equal(t, "files in the chat folder", len(des), 0)
		})
	}
}

func TestConcurrentAppendsLoseNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stores int // goroutines share this many *File on one folder
	}{
		{"one store", 1},
		{"two stores on one folder", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var stores []*File
			for range tt.stores {
				stores = append(stores, openFile(t, dir, FileOptions{}))
			}
			const writers, each = 8, 20
			var wg sync.WaitGroup
			for w := range writers {
				s := stores[w%len(stores)]
				wg.Go(func() {
					for i := range each {
						if _, err := s.Append(context.Background(), threadA, store.NewMessage{Text: fmt.Sprintf("w%d-%d", w, i)}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()

			msgs, _ := readThread(t, dir, threadA)
			assert.Equal(t, "messages stored", len(msgs), writers*each)
			seen := map[string]bool{}
			for i, m := range msgs {
				assert.True(t, !seen[m.Text], "message %q stored twice", m.Text)
				seen[m.Text] = true
				assert.True(t, i == 0 || m.Epoch > msgs[i-1].Epoch, "epochs not increasing at %d", i)
			}
			for _, s := range stores { // every store sees the other's writes
				p, err := s.Since(t.Context(), threadA, 0, 0)
				assert.Success(t, err)
				assert.Equal(t, "messages seen", len(p.Messages), writers*each)
			}
		})
	}
}

// Two stores on one folder stand for two processes. Under count retention a
// thread's document keeps the same size, and a freed inode is soon reused,
// so a cache keyed by (inode, size, mtime) alone can hand a writer a stale
// document: the other store's message would vanish.
func TestTwoStoresWithSteadySizeLoseNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opt := FileOptions{Retention: chatrelay.Retention{Messages: 3}}
	stores := []*File{openFile(t, dir, opt), openFile(t, dir, opt)}
	const each = 150
	acked := make([][]int64, len(stores))
	var wg sync.WaitGroup
	for w, s := range stores {
		wg.Go(func() {
			for i := range each {
				e, err := s.Append(context.Background(), threadA, store.NewMessage{Text: fmt.Sprintf("w%d-%03d", w, i)})
				if err != nil {
					t.Error(err)
					return
				}
				acked[w] = append(acked[w], e.Epoch)
			}
		})
	}
	wg.Wait()

	msgs, trimmed := readThread(t, dir, threadA)
	kept := map[int64]bool{}
	for _, m := range msgs {
		kept[m.Epoch] = true
	}
	all := slices.Concat(acked...)
	slices.Sort(all)
	assert.Equal(t, "distinct acknowledged epochs", len(slices.Compact(slices.Clone(all))), len(all))
	for _, e := range all {
		assert.True(t, kept[e] || e <= trimmed, "acknowledged epoch %d neither kept nor trimmed (trimmed %d)", e, trimmed)
	}
}

func TestRetentionOnAppend(t *testing.T) {
	t.Parallel()
	t.Run("by count", func(t *testing.T) {
		t.Parallel()
		clk := testclock.New(t0)
		dir := t.TempDir()
		s := openFile(t, dir, FileOptions{Retention: chatrelay.Retention{Messages: 3}, Now: clk.Now})
		var es []store.Entry
		for i := range 5 {
			es = append(es, appendText(t, s, threadA, fmt.Sprint("m", i)))
			clk.Advance(time.Second)
		}
		p, err := s.Since(t.Context(), threadA, 0, 0)
		assert.Success(t, err)
		assert.Equal(t, "kept", texts(p), []string{"m2", "m3", "m4"})
		_, trimmed := readThread(t, dir, threadA)
		assert.Equal(t, "trimmed", trimmed, es[1].Epoch)
	})
	t.Run("by age", func(t *testing.T) {
		t.Parallel()
		clk := testclock.New(t0)
		s := openFile(t, "", FileOptions{Retention: chatrelay.Retention{Age: 24 * time.Hour}, Now: clk.Now})
		appendText(t, s, threadA, "old")
		clk.Advance(12 * time.Hour)
		appendText(t, s, threadA, "middle")
		clk.Advance(12*time.Hour + time.Millisecond) // "old" is now older than 24h
		appendText(t, s, threadA, "new")
		p, err := s.Since(t.Context(), threadA, 0, 0)
		assert.Success(t, err)
		assert.Equal(t, "kept", texts(p), []string{"middle", "new"})
	})
}

func TestSweep(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{Retention: chatrelay.Retention{Age: time.Hour}, Now: clk.Now})
	appendText(t, s, threadA, "a-old")
	appendText(t, s, threadB, "b-old")
	clk.Advance(30 * time.Minute)
	appendText(t, s, threadB, "b-new")
	clk.Advance(31 * time.Minute)

	st, err := s.Sweep(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "stats", st, store.SweepStats{Threads: 2, Dropped: 2, ThreadsRemoved: 1})

	_, err = os.Stat(filepath.Join(dir, "chat", threadA+".json"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "swept thread", p, store.Page{Thread: threadA})
	p, err = s.Since(t.Context(), threadB, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "kept", texts(p), []string{"b-new"})

	// A swept thread can be written again.
	appendText(t, s, threadA, "a-again")
	p, err = s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "after sweep", texts(p), []string{"a-again"})
}

func TestSweepRemovesCrashTempFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "hello")
	chat := filepath.Join(dir, "chat")
	// What a writer killed between CreateTemp and Rename leaves behind: one
	// beside an existing thread, one for a thread it was creating; in the
	// temp folder, and beside the documents (a binary older than it).
	assert.Success(t, os.MkdirAll(filepath.Join(chat, tempFolder), 0o700))
	for _, name := range []string{"." + threadA + ".json.tmp-123", "." + threadB + ".json.tmp-456"} {
		assert.Success(t, os.WriteFile(filepath.Join(chat, name), []byte(`{"version":1`), 0o600))
		assert.Success(t, os.WriteFile(filepath.Join(chat, tempFolder, name+"7"), []byte(`{"version":1`), 0o600))
	}
	_, err := s.Sweep(t.Context())
	assert.Success(t, err)
	for _, d := range []string{chat, filepath.Join(chat, tempFolder)} {
		tmps, err := filepath.Glob(filepath.Join(d, ".*.tmp-*"))
		assert.Success(t, err)
		assert.Equal(t, "temp files left in "+d, tmps, []string(nil))
	}
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "thread after sweep", texts(p), []string{"hello"})
	_, err = os.Stat(filepath.Join(chat, threadB+".json"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// TestSweepRemovesACrashLockFile: a writer killed while it created a
// thread (the server or a host CLI's reply, SIGKILLed before the document
// was linked) leaves the thread's lock file and no document; the sweep
// removes it once it is an hour old, as it removes such a writer's temp
// files, and keeps the lock file of a thread that has a document.
func TestSweepRemovesACrashLockFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "hello")
	chat := filepath.Join(dir, "chat")
	// An hour old: a younger one may be a creator's that holds it now.
	lock := filepath.Join(chat, threadB+".json.lock")
	assert.Success(t, os.WriteFile(lock, nil, 0o600))
	_, err := s.Sweep(t.Context())
	assert.Success(t, err)
	_, err = os.Stat(lock)
	assert.Success(t, err)
	old := time.Now().Add(-2 * time.Hour)
	assert.Success(t, os.Chtimes(lock, old, old))
	_, err = s.Sweep(t.Context())
	assert.Success(t, err)
	locks, err := filepath.Glob(filepath.Join(chat, "*.json.lock"))
	assert.Success(t, err)
	assert.Equal(t, "lock files left", locks, []string{filepath.Join(chat, threadA+".json.lock")})
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "thread after sweep", texts(p), []string{"hello"})
	// The thread whose lock went is written as any new one.
	appendText(t, s, threadB, "again")
	p, err = s.Since(t.Context(), threadB, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "new thread", texts(p), []string{"again"})
}

// TestSweepRemovesTheRecordsOfARemovedThread: a sweep killed while it
// removed a thread, its document gone and its share links' record, audit
// and push subscriptions not yet, leaves them to the next sweep, which
// removes them; the owner's next post makes the thread again without its
// old share links (they had come back with it, for as long as they had
// left to run).
func TestSweepRemovesTheRecordsOfARemovedThread(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "hello")
	digest := strings.Repeat("0f", 32)
	g := chatrelay.Grant{ID: "p_0011aabb", Name: "Jo", Kind: chatrelay.Human, Role: chatrelay.Viewer,
		CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(24 * time.Hour).UnixMilli(), Digest: digest}
	assert.Success(t, s.Invite(t.Context(), threadA, g))
	chat := filepath.Join(dir, "chat")
	assert.Success(t, os.WriteFile(filepath.Join(chat, threadA+".audit.jsonl"), []byte(`{"at":1,"event":"issued","participant":"p_0011aabb"}`+"\n"), 0o600))
	assert.Success(t, os.WriteFile(filepath.Join(chat, threadA+".push.json"), []byte(`{"version":1,"thread":"`+threadA+`","subscriptions":[]}`), 0o600))
	assert.Success(t, os.Remove(filepath.Join(chat, threadA+".json"))) // the killed sweep's last step

	s = openFile(t, dir, FileOptions{}) // the next server
	_, err := s.Sweep(t.Context())
	assert.Success(t, err)
	left, err := filepath.Glob(filepath.Join(chat, threadA+".*"))
	assert.Success(t, err)
	assert.Equal(t, "the removed thread's files", left, []string(nil))

	appendText(t, s, threadA, "again")
	grants, err := s.Grants(t.Context(), threadA)
	assert.Success(t, err)
	assert.Equal(t, "share links of the thread made again", len(grants), 0)
	_, _, err = s.Resolve(t.Context(), digest)
	assert.Code(t, err, chatrelay.Unauthorized)
}

func TestSinceAndReset(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	s := openFile(t, "", FileOptions{Retention: chatrelay.Retention{Messages: 3}, Now: clk.Now})
	var es []store.Entry
	for i := range 5 {
		es = append(es, appendText(t, s, threadA, fmt.Sprint("m", i)))
		clk.Advance(time.Second)
	}
	// Kept: m2 m3 m4; trimmed = m1's epoch.
	tests := []struct {
		name      string
		since     int64
		limit     int
		want      []string
		wantReset bool
	}{
		{"no cursor", 0, 0, []string{"m2", "m3", "m4"}, false},
		{"no cursor, limit", 0, 2, []string{"m3", "m4"}, false},
		{"cursor before everything dropped", es[0].Epoch - 1, 0, []string{"m2", "m3", "m4"}, true},
		{"cursor inside the dropped part", es[0].Epoch, 0, []string{"m2", "m3", "m4"}, true},
		{"cursor at the newest dropped", es[1].Epoch, 0, []string{"m2", "m3", "m4"}, false},
		{"cursor at a kept message", es[2].Epoch, 0, []string{"m3", "m4"}, false},
		{"cursor between messages", es[2].Epoch + 1, 0, []string{"m3", "m4"}, false},
		{"cursor at the newest", es[4].Epoch, 0, nil, false},
		{"cursor in the future", es[4].Epoch + 1000, 0, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := s.Since(t.Context(), threadA, tt.since, tt.limit)
			assert.Success(t, err)
			assert.Equal(t, "messages", texts(p), tt.want)
			assert.Equal(t, "reset", p.Reset, tt.wantReset)
			assert.Equal(t, "cursor", p.Cursor, es[4].Epoch)
			assert.Equal(t, "awaiting", p.Awaiting, true)
		})
	}

	_, err := s.Append(t.Context(), threadA, store.NewMessage{Author: chatrelay.Hermes, Text: "answer", MustExist: true})
	assert.Success(t, err)
	p, err := s.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "awaiting after hermes", p.Awaiting, false)
}

func TestSinceOfMissingThreadCreatesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	p, err := s.Since(t.Context(), threadA, 0, 50)
	assert.Success(t, err)
	assert.Equal(t, "page", p, store.Page{Thread: threadA})
	des, err := os.ReadDir(filepath.Join(dir, "chat"))
	assert.Success(t, err)
	assert.Equal(t, "files in the chat folder", len(des), 0)
}

func TestThreadLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{MaxThreads: 2})
	appendText(t, s, threadA, "a")
	appendText(t, s, threadB, "b")
	_, err := s.Append(t.Context(), "ffffffffffffffff", store.NewMessage{Text: "c"})
	assert.Code(t, err, chatrelay.ThreadLimit)
	_, err = os.Stat(filepath.Join(dir, "chat", "ffffffffffffffff.json.lock"))
	assert.ErrorIs(t, err, fs.ErrNotExist) // a refused thread leaves nothing behind
	appendText(t, s, threadA, "existing threads keep working")
}

// Two stores on one folder (two processes, as far as flock is concerned)
// race to create the last thread the limit allows: exactly one wins.
func TestThreadLimitRace(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		dir := t.TempDir()
		a := openFile(t, dir, FileOptions{MaxThreads: 2})
		b := openFile(t, dir, FileOptions{MaxThreads: 2})
		appendText(t, a, threadA, "first")
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, s := range []*File{a, b} {
			thread := fmt.Sprintf("%016x", 0xbeef00+i)
			wg.Go(func() {
				_, errs[i] = s.Append(context.Background(), thread, store.NewMessage{Text: "race"})
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				assert.Code(t, err, chatrelay.ThreadLimit)
			}
		}
		assert.True(t, won == 1, "round %d: %d stores created the last thread (errs %v)", round, won, errs)
		names, err := a.threadNames()
		assert.Success(t, err)
		assert.Equal(t, "threads", len(names), 2)
	}
}

func TestPermissions(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	s, err := OpenFile(data, FileOptions{Log: slog.New(slog.DiscardHandler)}) // with fsync, the default
	assert.Success(t, err)
	appendText(t, s, threadA, "secret")
	for _, d := range []string{data, filepath.Join(data, "chat")} {
		fi, err := os.Stat(d)
		assert.Success(t, err)
		assert.Equal(t, d+" mode", fi.Mode().Perm(), fs.FileMode(0o700))
	}
	des, err := os.ReadDir(filepath.Join(data, "chat"))
	assert.Success(t, err)
	assert.True(t, len(des) >= 2, "want a document and its lock, got %d files", len(des))
	for _, de := range des {
		fi, err := de.Info()
		assert.Success(t, err)
		assert.Equal(t, de.Name()+" mode", fi.Mode().Perm(), fs.FileMode(0o600))
	}
}

func TestUnreadableThreadIsNeverOverwritten(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	dir := t.TempDir()
	var logs bytes.Buffer
	s := openFile(t, dir, FileOptions{Retention: chatrelay.Retention{Age: time.Hour}, Now: clk.Now, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	appendText(t, s, threadB, "other thread")
	bad := []byte(`{"version":1,"thread":"a1b2c3d4e5f60718","messages":[{"id":`)
	path := filepath.Join(dir, "chat", threadA+".json")
	assert.Success(t, os.WriteFile(path, bad, 0o600))

	_, err := s.Append(t.Context(), threadA, store.NewMessage{Text: "hi"})
	assert.Code(t, err, chatrelay.ThreadUnreadable)
	_, err = s.Since(t.Context(), threadA, 0, 0)
	assert.Code(t, err, chatrelay.ThreadUnreadable)
	clk.Advance(2 * time.Hour)
	_, err = s.Sweep(t.Context())
	assert.Success(t, err)

	got, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.True(t, bytes.Equal(got, bad), "the unreadable document was changed: %q", got)
	assert.True(t, strings.Contains(logs.String(), path), "the log does not name %s:\n%s", path, logs.String())
	appendText(t, s, threadB, "still working")
}

// TestInviteIntoUnreadableThread: an invite (a share link or a device)
// into a thread whose document does not parse is refused as
// ThreadUnreadable, as a post, a read or a push subscription is, never as
// NotFound "this thread has no message yet" (it has messages: they do not
// parse); the grants record and the document are left as they were, and a
// revoke still works there.
func TestInviteIntoUnreadableThread(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "hello")
	ctx := t.Context()
	grant := func(id string) chatrelay.Grant {
		return chatrelay.Grant{ID: id, Name: "Jo", Kind: chatrelay.Human, Role: chatrelay.Commenter, Cap: 5,
			CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli(), Digest: strings.Repeat(id[2:4], 32)}
	}
	assert.Success(t, s.Invite(ctx, threadA, grant("p_0011aabb")))
	bad := []byte(`{"version":1,"thread":"a1b2c3d4e5f60718","messages":[{"id":`)
	path := filepath.Join(dir, "chat", threadA+".json")
	assert.Success(t, os.WriteFile(path, bad, 0o600))
	before := folderFiles(t, dir)

	assert.Code(t, s.Invite(ctx, threadA, grant("p_0022ccdd")), chatrelay.ThreadUnreadable)
	assert.Equal(t, "the folder after a refused invite", folderFiles(t, dir), before)
	got, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.True(t, bytes.Equal(got, bad), "the unreadable document was changed: %q", got)
	grants, err := s.Grants(ctx, threadA)
	assert.Success(t, err)
	assert.Equal(t, "grants after a refused invite", len(grants), 1)
	g, err := s.Revoke(ctx, threadA, "p_0011aabb")
	assert.Success(t, err)
	assert.True(t, g.RevokedAt != 0, "the revoke of a grant of an unreadable thread was not stored")
}

func TestReadersNeverSeeATornDocument(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := openFile(t, dir, FileOptions{Retention: chatrelay.Retention{Messages: 1000}})
	r := openFile(t, dir, FileOptions{})
	appendText(t, w, threadA, "first")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			if _, err := w.Append(context.Background(), threadA, store.NewMessage{Text: fmt.Sprint("m", i)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	last := 0
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		p, err := r.Since(t.Context(), threadA, 0, 0)
		assert.Success(t, err)
		assert.True(t, len(p.Messages) >= last, "a reader went back from %d to %d messages", last, len(p.Messages))
		last = len(p.Messages)
	}
	p, err := r.Since(t.Context(), threadA, 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", len(p.Messages), 201)
}

func TestThreadsNewestFirst(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	s := openFile(t, "", FileOptions{Now: clk.Now})
	appendText(t, s, threadA, "a")
	clk.Advance(time.Minute)
	appendText(t, s, threadB, "b")
	clk.Advance(time.Minute)
	_, err := s.Append(t.Context(), threadA, store.NewMessage{Author: chatrelay.Hermes, Text: "answer", MustExist: true})
	assert.Success(t, err)

	infos, err := s.Threads(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "threads", infos, []store.ThreadInfo{
		{Thread: threadA, Messages: 2, LastAuthor: chatrelay.Hermes, LastEpoch: t0.Add(2 * time.Minute).UnixMilli(), Rev: t0.Add(2 * time.Minute).UnixMilli(), Awaiting: false},
		{Thread: threadB, Messages: 1, LastAuthor: chatrelay.Operator, LastEpoch: t0.Add(time.Minute).UnixMilli(), Rev: t0.Add(time.Minute).UnixMilli(), Awaiting: true},
	})
}

// A writer must not trust a cached document that another process replaced,
// even when the replacement has the same size (count retention keeps it
// steady) and the same mtime (one coarse timestamp tick): the append would
// then drop what the other process wrote. The cache pins the inode it read,
// so the replacement, always a new file renamed into place, has another
// inode number, and that is what gives it away. (Chatrelay never writes a
// document in place; an edit in place that also keeps size and mtime is
// outside the protocol.)
func TestWriterIsNotFooledByAFileIdentityCollision(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	dir, other := t.TempDir(), t.TempDir()
	opt := FileOptions{Retention: chatrelay.Retention{Messages: 3}, Now: clk.Now}
	a := openFile(t, dir, opt)
	for i := range 4 { // one trimmed already, so the document's size stays put
		appendText(t, a, threadA, fmt.Sprint("a", i))
		clk.Advance(time.Second)
	}
	path := filepath.Join(dir, "chat", threadA+".json")
	before, err := os.Stat(path)
	assert.Success(t, err)

	// Another process appends "b4": its document has the same size.
	data, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.Success(t, os.MkdirAll(filepath.Join(other, "chat"), 0o700))
	assert.Success(t, os.WriteFile(filepath.Join(other, "chat", threadA+".json"), data, 0o600))
	b := openFile(t, other, opt)
	appendText(t, b, threadA, "b4")
	clk.Advance(time.Second)
	changed, err := os.ReadFile(filepath.Join(other, "chat", threadA+".json"))
	assert.Success(t, err)
	assert.Equal(t, "document size", len(changed), len(data))
	// ... and it is renamed into place, as every writer does, with the old mtime.
	tmp := filepath.Join(dir, "chat", ".other.tmp")
	assert.Success(t, os.WriteFile(tmp, changed, 0o600))
	assert.Success(t, os.Chtimes(tmp, before.ModTime(), before.ModTime()))
	assert.Success(t, os.Rename(tmp, path))
	after, err := os.Stat(path)
	assert.Success(t, err)
	assert.Equal(t, "size", after.Size(), before.Size())
	assert.True(t, after.ModTime().Equal(before.ModTime()), "mtime %v, want %v", after.ModTime(), before.ModTime())
	assert.True(t, !os.SameFile(before, after), "the replacement reused the pinned inode")

	appendText(t, a, threadA, "a5")
	msgs, _ := readThread(t, dir, threadA)
	var got []string
	for _, m := range msgs {
		got = append(got, m.Text)
	}
	assert.Equal(t, "messages", got, []string{"a3", "b4", "a5"})
}

// openDocs counts this process's descriptors open on thread documents
// (suffix ".json") or their lock files (".json.lock") of the store in dir.
func openDocs(t *testing.T, dir, suffix string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	assert.Success(t, err)
	chat := filepath.Join(dir, "chat") + string(filepath.Separator)
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, chat) && strings.HasSuffix(target, suffix) {
			n++
		}
	}
	return n
}

// TestOpenDocumentsAreBounded: the cache keeps at most MaxOpenDocs
// documents open however many threads are read, and a thread it let go
// of still reads another process's writes.
func TestOpenDocumentsAreBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const threads, limit = 40, 4
	a := openFile(t, dir, FileOptions{MaxThreads: threads, MaxOpenDocs: limit})
	b := openFile(t, dir, FileOptions{MaxThreads: threads})
	thread := func(i int) string { return fmt.Sprintf("%016x", i+1) }
	for i := range threads {
		appendText(t, a, thread(i), "hello")
	}
	for range 2 {
		for i := range threads {
			p, err := a.Since(context.Background(), thread(i), 0, 0)
			assert.Success(t, err)
			assert.Equal(t, "messages of "+thread(i), texts(p), []string{"hello"})
		}
	}
	// b holds none open: it has read nothing.
	assert.True(t, openDocs(t, dir, ".json") <= limit, "%d documents open, the bound is %d", openDocs(t, dir, ".json"), limit)
	assert.True(t, openDocs(t, dir, ".json.lock") <= limit, "%d lock files open, the bound is %d", openDocs(t, dir, ".json.lock"), limit)

	appendText(t, b, thread(0), "from another process") // thread 0 was let go of long ago
	p, err := a.Since(context.Background(), thread(0), 0, 0)
	assert.Success(t, err)
	assert.Equal(t, "messages", texts(p), []string{"hello", "from another process"})
	assert.True(t, openDocs(t, dir, ".json") <= limit+1, "%d documents open", openDocs(t, dir, ".json")) // + b's pin of thread 0
}

// TestUnpinnedDocumentIsNotFooledByAnIdentityCollision: once the cache has
// let go of a document, its inode may be reused; a replacement with the
// same inode, size and mtime but other bytes is still read.
func TestUnpinnedDocumentIsNotFooledByAnIdentityCollision(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := openFile(t, dir, FileOptions{MaxOpenDocs: 1})
	appendText(t, a, threadA, "one")
	path := filepath.Join(dir, "chat", threadA+".json")
	before, err := os.Stat(path)
	assert.Success(t, err)
	appendText(t, a, threadB, "other") // unpins threadA's document
	assert.Equal(t, "texts", texts(mustSince(t, a, threadA)), []string{"one"})
	appendText(t, a, threadB, "other again")

	// Rewrite the same file in place, as no writer does, keeping its
	// inode, size and mtime: only the bytes tell.
	data, err := os.ReadFile(path)
	assert.Success(t, err)
	changed := bytes.Replace(data, []byte(`"one"`), []byte(`"two"`), 1)
	assert.Success(t, os.WriteFile(path, changed, 0o600))
	assert.Success(t, os.Chtimes(path, before.ModTime(), before.ModTime()))
	after, err := os.Stat(path)
	assert.Success(t, err)
	assert.True(t, os.SameFile(before, after) && after.Size() == before.Size() && after.ModTime().Equal(before.ModTime()), "the file's identity changed")

	assert.Equal(t, "texts", texts(mustSince(t, a, threadA)), []string{"two"})
}

func mustSince(t *testing.T, s store.Store, thread string) store.Page {
	t.Helper()
	p, err := s.Since(context.Background(), thread, 0, 0)
	assert.Success(t, err)
	return p
}

// TestAppendAfterAnotherProcessSwept: a thread this store has cached but
// another process swept away is created anew by the next append, and
// counted against the limit again.
func TestAppendAfterAnotherProcessSwept(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	dir := t.TempDir()
	opt := FileOptions{Retention: chatrelay.Retention{Age: time.Hour}, MaxThreads: 2, Now: clk.Now}
	a, b := openFile(t, dir, opt), openFile(t, dir, opt)
	appendText(t, a, threadA, "old")
	clk.Advance(2 * time.Hour)
	st, err := b.Sweep(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "removed", st.ThreadsRemoved, 1)

	appendText(t, a, threadA, "again")
	assert.Equal(t, "texts", texts(mustSince(t, b, threadA)), []string{"again"})
	appendText(t, a, threadB, "second thread")
	_, err = a.Append(t.Context(), "00000000000000ff", store.NewMessage{Text: "third"})
	assert.Code(t, err, chatrelay.ThreadLimit)
}

// TestDirSyncCoversEveryCaller: a caller of the grouped folder fsync
// returns only after an fsync that started after its call has finished,
// with that fsync's outcome, and concurrent callers share fsyncs.
func TestDirSyncCoversEveryCaller(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64 // orders calls, fsync starts and ends
	type span struct{ start, end int64 }
	var mu sync.Mutex
	var syncs []span
	d := newDirSync(t.TempDir())
	d.fsyncFn = func() error {
		sp := span{start: clock.Add(1)}
		time.Sleep(time.Millisecond) // an fsync takes a while; others call meanwhile
		sp.end = clock.Add(1)
		mu.Lock()
		syncs = append(syncs, sp)
		failed := len(syncs)%5 == 0
		mu.Unlock()
		if failed {
			return fmt.Errorf("fsync %d failed", len(syncs))
		}
		return nil
	}
	const callers = 200
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			called := clock.Add(1)
			err := d.sync()
			returned := clock.Add(1)
			mu.Lock()
			defer mu.Unlock()
			// Some fsync that started after the call ended before it
			// returned, and the call has that fsync's outcome.
			covered := false
			for i, sp := range syncs {
				if sp.start > called && sp.end < returned && ((i+1)%5 == 0) == (err != nil) {
					covered = true
				}
			}
			if !covered {
				t.Errorf("call at %d returned at %d with %v: no fsync that started after it ended before with that outcome (%v)", called, returned, err, syncs)
			}
		})
	}
	wg.Wait()
	d.close()
	t.Logf("%d callers, %d fsyncs", callers, len(syncs))
	assert.True(t, len(syncs) < callers, "%d fsyncs for %d concurrent callers: none shared", len(syncs), callers)
}

// TestThreadLockExcludesOtherLockers: the lock a writer takes (kept open
// between writes) is the flock of <thread>.json.lock that another process
// or tool takes with gofrs/flock: each waits for the other.
func TestThreadLockExcludesOtherLockers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{LockTimeout: 50 * time.Millisecond})
	appendText(t, s, threadA, "one")
	lockPath := filepath.Join(dir, "chat", threadA+".json.lock")

	other := newFlock(lockPath) // another process's lock
	ok, err := other.TryLock()
	assert.Success(t, err)
	assert.True(t, ok, "the lock is held after the append")
	_, err = s.Append(t.Context(), threadA, store.NewMessage{Text: "while another holds the lock"})
	assert.Code(t, err, chatrelay.StoreUnavailable)
	assert.Success(t, other.Unlock())
	appendText(t, s, threadA, "two")

	// And the other way round: a writer in the middle of a write holds it.
	_, unlock, err := s.lockState(t.Context(), threadA)
	assert.Success(t, err)
	ok, err = newFlock(lockPath).TryLock()
	assert.Success(t, err)
	assert.True(t, !ok, "another locker got the lock a writer holds")
	unlock()
	assert.Equal(t, "texts", texts(mustSince(t, s, threadA)), []string{"one", "two"})
}

// TestWaitInLineIsBounded: a write waits at most LockTimeout for the
// thread, in line behind this process's other writers as at another
// process's flock. Before, its wait in line was not bounded: behind a
// writer waiting for another process's lock, each post of a queue waited
// its turn and then its own LockTimeout (a probe saw a second post wait
// 16.5 s for a 10 s timeout); behind a writer that never let go, for ever.
func TestWaitInLineIsBounded(t *testing.T) {
	t.Parallel()
	s := openFile(t, t.TempDir(), FileOptions{LockTimeout: 50 * time.Millisecond})
	appendText(t, s, threadA, "one")
	_, unlock, err := s.lockState(t.Context(), threadA) // a writer of this process, in the middle of a write
	assert.Success(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(t.Context(), threadA, store.NewMessage{Text: "in line"})
		done <- err
	}()
	select {
	case err := <-done:
		assert.Code(t, err, chatrelay.StoreUnavailable)
	case <-time.After(10 * time.Second): // 200 × LockTimeout: it waits for the writer
		unlock()
		t.Fatalf("a post in line behind a writer was still waiting after 10 s (LockTimeout 50 ms): %v", <-done)
	}
	unlock()
	appendText(t, s, threadA, "two")
	assert.Equal(t, "texts", texts(mustSince(t, s, threadA)), []string{"one", "two"})
}

// folderFiles lists the names in the chat folder of dir.
func folderFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, "chat"))
	assert.Success(t, err)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// TestRefusedCallsLeaveNothing: a call refused for a thread with no
// document (anyone with any token can make one) leaves the folder as it
// was, and keeps no state of the thread: before the fix an invite, a
// revoke or a grant's mark left <thread>.json.lock, and state in memory.
func TestRefusedCallsLeaveNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "a thread that exists")
	before := folderFiles(t, dir)
	ctx := t.Context()
	g := chatrelay.Grant{ID: "p_0011aabb", Name: "Jo", Kind: chatrelay.Human, Role: chatrelay.Commenter, Cap: 5,
		CreatedAt: 1, ExpiresAt: time.Now().Add(time.Hour).UnixMilli(), Digest: strings.Repeat("0f", 32)}
	for _, c := range []struct {
		name string
		call func() error
		code chatrelay.Code
	}{
		{"invite", func() error { return s.Invite(ctx, threadB, g) }, chatrelay.NotFound},
		{"revoke", func() error { _, err := s.Revoke(ctx, threadB, g.ID); return err }, chatrelay.NotFound},
		{"mark used", func() error { _, err := s.MarkUsed(ctx, threadB, g.ID); return err }, ""},
		{"note expired", func() error { _, err := s.NoteExpired(ctx, threadB, g.ID); return err }, ""},
		{"a participant's post", func() error {
			_, err := s.Append(ctx, threadB, store.NewMessage{Author: g.Author(), Participant: g.ID, Text: "hi"})
			return err
		}, chatrelay.NotFound},
		{"a reply that must find its thread", func() error {
			_, err := s.Append(ctx, threadB, store.NewMessage{Author: chatrelay.Hermes, Text: "hi", MustExist: true})
			return err
		}, chatrelay.NotFound},
		{"a reaction", func() error {
			_, err := s.Change(ctx, threadB, store.Change{Op: store.React, MessageID: "MSG-20260101-000000-abcdef", Emoji: "👍", By: chatrelay.Operator})
			return err
		}, chatrelay.NotFound},
	} {
		err := c.call()
		if c.code == "" {
			assert.Success(t, err)
		} else {
			assert.Code(t, err, c.code)
		}
		assert.Equal(t, "the folder after "+c.name, folderFiles(t, dir), before)
		assert.True(t, s.peek(threadB) == nil, "%s kept state of a thread that does not exist", c.name)
	}
}

// TestSweptThreadLeavesNothing: a thread the sweep removes leaves no
// file, its lock file included; it can be written again.
func TestSweptThreadLeavesNothing(t *testing.T) {
	t.Parallel()
	clk := testclock.New(t0)
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{Retention: chatrelay.Retention{Age: time.Hour}, Now: clk.Now})
	appendText(t, s, threadB, "kept")
	appendText(t, s, threadB, "kept, replaced") // a replace makes the store's temp folder, which stays
	before := folderFiles(t, dir)
	appendText(t, s, threadA, "swept")
	clk.Advance(2 * time.Hour)
	appendText(t, s, threadB, "kept too")
	_, err := s.Sweep(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "the folder after the sweep", folderFiles(t, dir), before)
	appendText(t, s, threadA, "again")
	assert.Equal(t, "texts", texts(mustSince(t, s, threadA)), []string{"again"})
}

// TestRemovedLockFileStillExcludes: a writer waiting on a thread's lock
// file that its holder removes (it found no document) takes the file at
// the path instead of the removed one, so that it still excludes, and is
// excluded by, every other locker of the thread.
func TestRemovedLockFileStillExcludes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "chat", threadA+".json.lock")
	waiter := openFile(t, dir, FileOptions{LockTimeout: time.Minute})
	holder := openFile(t, dir, FileOptions{}) // another process, as far as flock is concerned
	ht, unlock, err := holder.lockState(t.Context(), threadA)
	assert.Success(t, err)
	opened := func() int { // this process's descriptors of the lock file, removed or not
		fds, _ := os.ReadDir("/proc/self/fd")
		n := 0
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, lockPath) {
				n++
			}
		}
		return n
	}
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Append(context.Background(), threadA, store.NewMessage{Author: chatrelay.Operator, Text: "after the wait"})
		done <- err
	}()
	assert.Eventually(t, 10*time.Second, "the waiter opened the lock file", func() bool { return opened() == 2 })
	ht.drop = true // what a holder that found no document does
	unlock()
	assert.Success(t, <-done)

	other := newFlock(lockPath) // another locker of the path
	ok, err := other.TryLock()
	assert.Success(t, err)
	assert.True(t, ok, "the lock file at the path is held after the write")
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = waiter.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Text: "while another holds the lock"})
	assert.Code(t, err, chatrelay.StoreUnavailable)
	assert.Success(t, other.Unlock())
	assert.Equal(t, "texts", texts(mustSince(t, waiter, threadA)), []string{"after the wait"})
}

// TestSweepRemovesTheFilesOfAThreadRemovedMidway: a sweep killed after
// it removed a thread's document, before its attachments (the last
// step: no message ever names a file that is gone), leaves the thread's
// files folder; the next sweep removes it, the uploads a message named
// and one no message named yet (once its unused hour is past).
func TestSweepRemovesTheFilesOfAThreadRemovedMidway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := testclock.New(t0)
	s := openFile(t, dir, FileOptions{Now: clk.Now})
	ctx := t.Context()
	named, err := s.PutAttachment(ctx, threadA, store.Upload{Name: "a.txt", Body: strings.NewReader("named")})
	assert.Success(t, err)
	_, err = s.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Text: "see", Attachments: []string{named.ID}})
	assert.Success(t, err)
	_, err = s.PutAttachment(ctx, threadA, store.Upload{Name: "b.txt", Body: strings.NewReader("draft")})
	assert.Success(t, err)
	chat := filepath.Join(dir, "chat")
	assert.Success(t, os.Remove(filepath.Join(chat, threadA+".json"))) // the killed sweep's step before the files
	if _, err := os.Stat(filepath.Join(chat, threadA+".files", "index.json")); err != nil {
		t.Fatalf("the thread's uploads before the sweep: %v", err)
	}
	_, ttl := chatrelay.LimitAttachmentUnused.Duration()
	clk.Advance(ttl)

	s = openFile(t, dir, FileOptions{Now: clk.Now}) // the next server
	_, err = s.Sweep(ctx)
	assert.Success(t, err)
	left, err := filepath.Glob(filepath.Join(chat, threadA+"*"))
	assert.Success(t, err)
	assert.Equal(t, "the removed thread's files", left, []string(nil))
}
