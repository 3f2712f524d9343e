package filestore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// The thread's log (log.go): written by a store with AppendLog, read
// by every store (the readers here are opened without it, the default).

func chatFile(dir, name string) string { return filepath.Join(dir, "chat", name) }

// docVersionOn is the version of the thread's document on disk.
func docVersionOn(t *testing.T, dir, thread string) int {
	t.Helper()
	data, err := os.ReadFile(chatFile(dir, thread+".json"))
	assert.Success(t, err)
	_, ver, err := parseDocumentV(data, thread)
	assert.Success(t, err)
	return ver
}

// logLines is the thread's log, line by line (nil: empty or none).
func logLines(t *testing.T, dir, thread string) []string {
	t.Helper()
	data, err := os.ReadFile(chatFile(dir, thread+".log"))
	if os.IsNotExist(err) {
		return nil
	}
	assert.Success(t, err)
	if len(data) == 0 {
		return nil
	}
	assert.True(t, bytes.HasSuffix(data, []byte("\n")), "the log does not end in a whole line: %q", data)
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// freshTexts reads the thread with a new store on dir (nothing cached).
func freshTexts(t *testing.T, dir, thread string) []string {
	t.Helper()
	return texts(mustSince(t, openFile(t, dir, FileOptions{}), thread))
}

// docOnly is the thread's document as it is on disk, without its log.
func docOnly(t *testing.T, dir, thread string) []string {
	t.Helper()
	data, err := os.ReadFile(chatFile(dir, thread+".json"))
	assert.Success(t, err)
	d, err := parseDocument(data, thread)
	assert.Success(t, err)
	var out []string
	for _, e := range d.msgs {
		out = append(out, e.Text)
	}
	return out
}

// TestDefaultLayoutRewritesTheDocument: without AppendLog (the default,
// the contract's layout) every post rewrites <thread>.json, which then
// holds every message, at the version its content needs, and no
// <thread>.log is made.
func TestDefaultLayoutRewritesTheDocument(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{})
	appendText(t, s, threadA, "one")
	appendText(t, s, threadA, "two")
	assert.Equal(t, "the document", docOnly(t, dir, threadA), []string{"one", "two"})
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 2)
	_, err := os.Stat(chatFile(dir, threadA+".log"))
	assert.True(t, os.IsNotExist(err), "a log was made: %v", err)
}

// TestMixedSettingsLoseNothing: a store without AppendLog on a folder
// where one with it appends to the log (a server and the host CLI started
// with different settings) reads every message, sees the log's new lines,
// and its next post compacts: the log emptied, the document whole, at
// its content's version. The store with the log then goes on.
func TestMixedSettingsLoseNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	on := openFile(t, dir, FileOptions{AppendLog: true})
	off := openFile(t, dir, FileOptions{})
	postThreeLogged(t, on, dir)
	assert.Equal(t, "read without the option", texts(mustSince(t, off, threadA)), []string{"one", "two", "three"})
	appendText(t, on, threadA, "four")
	assert.Equal(t, "read again without the option", texts(mustSince(t, off, threadA)), []string{"one", "two", "three", "four"})

	appendText(t, off, threadA, "five")
	assert.Equal(t, "log lines after the post without the option", len(logLines(t, dir, threadA)), 0)
	assert.Equal(t, "the document", docOnly(t, dir, threadA), []string{"one", "two", "three", "four", "five"})
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 2)
	assert.Equal(t, "read by the store with the option", texts(mustSince(t, on, threadA)), []string{"one", "two", "three", "four", "five"})

	appendText(t, on, threadA, "six") // the document again, at version 5
	appendText(t, on, threadA, "seven")
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 1)
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 5)
	want := []string{"one", "two", "three", "four", "five", "six", "seven"}
	assert.Equal(t, "read without the option", texts(mustSince(t, off, threadA)), want)
	assert.Equal(t, "read back", freshTexts(t, dir, threadA), want)
}

// TestSweepWithoutTheOptionCompacts: a sweep by a store without
// AppendLog that drops messages of a thread with a log writes the
// document at its content's version, never 5, and empties the log.
func TestSweepWithoutTheOptionCompacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	on := openFile(t, dir, FileOptions{AppendLog: true, Retention: chatrelay.Retention{Messages: 1000}})
	postThreeLogged(t, on, dir)
	off := openFile(t, dir, FileOptions{Retention: chatrelay.Retention{Messages: 2}})
	st, err := off.Sweep(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "dropped", st.Dropped, 1)
	assert.Equal(t, "log lines after the sweep", len(logLines(t, dir, threadA)), 0)
	assert.Equal(t, "the document", docOnly(t, dir, threadA), []string{"two", "three"})
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 2)
}

// TestPostGoesToTheLog: a post that only adds a message appends its line
// to the thread's log and leaves the document as it was (same file, same
// bytes, same mtime); the document of a thread with a log is version 5.
func TestPostGoesToTheLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true})
	appendText(t, s, threadA, "one") // creates the document
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 5)
	before, err := os.Stat(chatFile(dir, threadA+".json"))
	assert.Success(t, err)
	doc, err := os.ReadFile(chatFile(dir, threadA+".json"))
	assert.Success(t, err)

	two := appendText(t, s, threadA, "two")
	three := appendText(t, s, threadA, "three")

	after, err := os.Stat(chatFile(dir, threadA+".json"))
	assert.Success(t, err)
	assert.True(t, os.SameFile(before, after) && after.ModTime().Equal(before.ModTime()), "the document was rewritten")
	again, err := os.ReadFile(chatFile(dir, threadA+".json"))
	assert.Success(t, err)
	assert.True(t, bytes.Equal(doc, again), "the document changed")
	assert.Equal(t, "log", logLines(t, dir, threadA), []string{string(two.JSON2), string(three.JSON2)})
	assert.Equal(t, "read back", freshTexts(t, dir, threadA), []string{"one", "two", "three"})
	assert.Equal(t, "read by the writer", texts(mustSince(t, s, threadA)), []string{"one", "two", "three"})
}

// TestLogCompactsAtItsBound: the log takes logMaxLines lines; the next
// post rewrites the document with every message and empties the log.
func TestLogCompactsAtItsBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true, Retention: chatrelay.Retention{Messages: 1000}})
	var want []string
	for i := range 1 + logMaxLines {
		want = append(want, fmt.Sprint("m", i))
		appendText(t, s, threadA, want[i])
	}
	assert.Equal(t, "lines at the bound", len(logLines(t, dir, threadA)), logMaxLines)
	want = append(want, "past the bound")
	appendText(t, s, threadA, "past the bound")
	assert.Equal(t, "lines after the compaction", len(logLines(t, dir, threadA)), 0)
	msgs, _ := readThread(t, dir, threadA)
	assert.Equal(t, "messages in the document", len(msgs), len(want))
	assert.Equal(t, "read back", freshTexts(t, dir, threadA), want)
	appendText(t, s, threadA, "next")
	assert.Equal(t, "lines after the next post", len(logLines(t, dir, threadA)), 1)
}

// TestLogCompactsAtTheDocumentsSize: a log may not hold more bytes than
// its document (or logMinBytes): big messages compact long before
// logMaxLines.
func TestLogCompactsAtTheDocumentsSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true, Retention: chatrelay.Retention{Messages: 1000}})
	big := strings.Repeat("x", chatrelay.MaxText)
	appendText(t, s, threadA, big)
	posts, most := 1, 0
	for ; posts < logMaxLines; posts++ {
		appendText(t, s, threadA, big)
		fi, err := os.Stat(chatFile(dir, threadA+".log"))
		assert.Success(t, err)
		if fi.Size() == 0 {
			break // compacted
		}
		most = max(most, int(fi.Size()))
	}
	assert.True(t, posts < logMaxLines, "no compaction in %d posts", posts)
	doc, err := os.Stat(chatFile(dir, threadA+".json"))
	assert.Success(t, err)
	assert.True(t, most <= logMinBytes && most+len(big) > logMinBytes, "the log grew to %d bytes (bound %d, document %d)", most, logMinBytes, doc.Size())
	assert.Equal(t, "read back", len(freshTexts(t, dir, threadA)), posts+1)
}

// TestChangeCompacts: a change (a reaction to a message still in the log)
// rewrites the document with every message and empties the log; a thread
// whose document holds everything is written at its content's version
// (an older binary may read it again).
func TestChangeCompacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true})
	appendText(t, s, threadA, "one")
	two := appendText(t, s, threadA, "two")
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 1)
	_, err := s.Change(t.Context(), threadA, store.Change{Op: store.React, MessageID: two.ID, Emoji: "👍", By: chatrelay.Hermes})
	assert.Success(t, err)
	assert.Equal(t, "log lines after the change", len(logLines(t, dir, threadA)), 0)
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 2)
	msgs, _ := readThread(t, dir, threadA)
	assert.True(t, len(msgs) == 2 && len(msgs[1].Reactions["👍"]) == 1, "the document: %v", msgs)

	appendText(t, s, threadA, "three") // the document again, at version 5
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 5)
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 0)
	appendText(t, s, threadA, "four") // then the log
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 1)
	p := mustSince(t, openFile(t, dir, FileOptions{}), threadA)
	assert.Equal(t, "read back", texts(p), []string{"one", "two", "three", "four"})
	assert.Equal(t, "reaction kept", len(p.Messages[1].Reactions["👍"]), 1)
}

// TestRetentionDropCompacts: a post that makes retention drop a message
// rewrites the document (its marks change).
func TestRetentionDropCompacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true, Retention: chatrelay.Retention{Messages: 3}})
	postThreeLogged(t, s, dir)
	appendText(t, s, threadA, "four")
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 0)
	msgs, trimmed := readThread(t, dir, threadA)
	assert.True(t, len(msgs) == 3 && trimmed > 0, "document: %d messages, trimmed %d", len(msgs), trimmed)
	assert.Equal(t, "read back", freshTexts(t, dir, threadA), []string{"two", "three", "four"})
}

// TestTornLogTail: a last line without its newline, or a last line that
// does not parse, was never acknowledged: readers leave it out, and the
// next post cuts it off before it appends.
func TestTornLogTail(t *testing.T) {
	t.Parallel()
	for name, tail := range map[string]string{
		"no newline":      `{"id":"MSG-20261023-184001-abcdef","epoch":1792780801123,"ts":"2026`,
		"does not parse":  "\x00\x00\x00\x00\x00\x00\n",
		"half and a line": `{"id":"MSG-2026` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{AppendLog: true})
			appendText(t, s, threadA, "one")
			appendText(t, s, threadA, "two")
			f, err := os.OpenFile(chatFile(dir, threadA+".log"), os.O_WRONLY|os.O_APPEND, 0)
			assert.Success(t, err)
			_, err = f.WriteString(tail)
			assert.Success(t, err)
			assert.Success(t, f.Close())

			assert.Equal(t, "read with the torn tail", freshTexts(t, dir, threadA), []string{"one", "two"})
			assert.Equal(t, "read by the writer", texts(mustSince(t, s, threadA)), []string{"one", "two"})
			other := openFile(t, dir, FileOptions{AppendLog: true}) // another process's post
			appendText(t, other, threadA, "three")
			lines := logLines(t, dir, threadA)
			assert.Equal(t, "log lines", len(lines), 2)
			assert.True(t, !strings.Contains(strings.Join(lines, "\n"), tail), "the torn tail is still there")
			assert.Equal(t, "read back", freshTexts(t, dir, threadA), []string{"one", "two", "three"})
			assert.Equal(t, "read by the first store", texts(mustSince(t, s, threadA)), []string{"one", "two", "three"})
		})
	}
}

// TestCorruptLogLineIsAnUnreadableThread: a line that does not parse with
// another after it is no torn tail: the thread is unreadable, as a
// document that does not parse is, and nothing is written over it.
func TestCorruptLogLineIsAnUnreadableThread(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true})
	appendText(t, s, threadA, "one")
	two := appendText(t, s, threadA, "two")
	bad := append([]byte("not a message\n"), two.JSON2...)
	bad = append(bad, '\n')
	assert.Success(t, os.WriteFile(chatFile(dir, threadA+".log"), bad, 0o600))

	fresh := openFile(t, dir, FileOptions{})
	_, err := fresh.Since(t.Context(), threadA, 0, 0)
	assert.Code(t, err, chatrelay.ThreadUnreadable)
	_, err = s.Append(t.Context(), threadA, store.NewMessage{Text: "three"})
	assert.Code(t, err, chatrelay.ThreadUnreadable)
	got, err := os.ReadFile(chatFile(dir, threadA+".log"))
	assert.Success(t, err)
	assert.True(t, bytes.Equal(got, bad), "the log was changed: %q", got)
}

// TestCompactionCrashDuplicatesNothing: a writer killed between the
// rename of the compacted document and the emptying of the log leaves
// the log's lines in both files: they are read once, and the next post
// goes on from there.
func TestCompactionCrashDuplicatesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true})
	appendText(t, s, threadA, "one")
	two := appendText(t, s, threadA, "two")
	appendText(t, s, threadA, "three")
	logged, err := os.ReadFile(chatFile(dir, threadA+".log"))
	assert.Success(t, err)
	_, err = s.Change(t.Context(), threadA, store.Change{Op: store.React, MessageID: two.ID, Emoji: "👍", By: chatrelay.Hermes})
	assert.Success(t, err)
	assert.Equal(t, "log lines after the change", len(logLines(t, dir, threadA)), 0)
	assert.Success(t, os.WriteFile(chatFile(dir, threadA+".log"), logged, 0o600)) // the crash: not emptied

	p := mustSince(t, openFile(t, dir, FileOptions{}), threadA)
	assert.Equal(t, "read back", texts(p), []string{"one", "two", "three"})
	assert.Equal(t, "the change kept", len(p.Messages[1].Reactions["👍"]), 1)
	other := openFile(t, dir, FileOptions{AppendLog: true})
	appendText(t, other, threadA, "four")
	appendText(t, other, threadA, "five")
	assert.Equal(t, "read back after posts", freshTexts(t, dir, threadA), []string{"one", "two", "three", "four", "five"})
	assert.Equal(t, "read by the first store", texts(mustSince(t, s, threadA)), []string{"one", "two", "three", "four", "five"})
}

// TestVersion4DocumentWithoutLogLoads: a document an older binary wrote
// (version 4, no log) reads as it did; the next post writes it anew at
// version 5, and only the one after goes to the log.
func TestVersion4DocumentWithoutLogLoads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	assert.Success(t, os.MkdirAll(filepath.Join(dir, "chat"), 0o700))
	v4 := `{"version":4,"thread":"` + threadA + `","trimmed":0,"trimmed_rev":0,"rev":1792780800123,"messages":[` +
		`{"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"old",` +
		`"attachments":[{"id":"at_000000000001","name":"a.txt","type":"text/plain","size":1,"sha256":"` + strings.Repeat("0", 64) + `"}]}]}` + "\n"
	assert.Success(t, os.WriteFile(chatFile(dir, threadA+".json"), []byte(v4), 0o600))
	s := openFile(t, dir, FileOptions{AppendLog: true, Now: func() time.Time { return t0.Add(time.Minute) }})
	assert.Equal(t, "read", texts(mustSince(t, s, threadA)), []string{"old"})
	appendText(t, s, threadA, "new")
	assert.Equal(t, "document version", docVersionOn(t, dir, threadA), 5)
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 0)
	appendText(t, s, threadA, "newer")
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 1)
	assert.Equal(t, "read back", freshTexts(t, dir, threadA), []string{"old", "new", "newer"})
}

// TestAnotherStoreSeesLogAppends: posts another process (a second store
// on the folder) appends to the log are seen by this store's reads and
// handed to its feed, each once and in order, across compactions, from
// the folder watch alone (rescans an hour apart) and with rescans racing
// the watch.
func TestAnotherStoreSeesLogAppends(t *testing.T) {
	t.Parallel()
	for _, rescan := range []time.Duration{time.Hour, time.Millisecond} {
		t.Run(fmt.Sprint("rescan=", rescan), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			reader := openFile(t, dir, FileOptions{Rescan: rescan})
			writer := openFile(t, dir, FileOptions{AppendLog: true, Retention: chatrelay.Retention{Messages: 1000}})
			appendText(t, writer, threadA, "m0")
			assert.Equal(t, "read", texts(mustSince(t, reader, threadA)), []string{"m0"})

			var mu sync.Mutex
			var fed []string
			ctx, cancel := context.WithCancel(t.Context())
			ready := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				reader.Follow(ctx, func(b store.Batch) {
					if b.Ready {
						close(ready)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					for _, e := range b.Messages {
						fed = append(fed, e.Text)
					}
				})
			})
			t.Cleanup(func() { cancel(); wg.Wait() })
			<-ready
			const n = 2*logMaxLines + 10 // two compactions on the way
			var want []string
			for i := 1; i <= n; i++ {
				want = append(want, fmt.Sprint("m", i))
				appendText(t, writer, threadA, want[i-1])
				if i%25 == 0 {
					got := texts(mustSince(t, reader, threadA))
					assert.Equal(t, "read after "+want[i-1], got[len(got)-1], want[i-1])
				}
			}
			assert.Eventually(t, 10*time.Second, "the feed has every post", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(fed) >= n
			})
			// A last rescan (or the poke of a repeated event) hands on nothing more.
			reader.rescan()
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, "fed", fed, want)
		})
	}
}

// TestSweepRemovesTheLog: a thread retention empties goes with its log;
// a log whose document is gone is swept too.
func TestSweepRemovesTheLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := t0
	s := openFile(t, dir, FileOptions{AppendLog: true, Retention: chatrelay.Retention{Age: time.Hour}, Now: func() time.Time { return now }})
	appendText(t, s, threadA, "one")
	appendText(t, s, threadA, "two")
	appendText(t, s, threadB, "b")
	appendText(t, s, threadB, "b2")
	assert.Success(t, os.Remove(chatFile(dir, threadB+".json"))) // by hand: the log stays
	now = now.Add(2 * time.Hour)
	_, err := s.Sweep(t.Context())
	assert.Success(t, err)
	left, err := filepath.Glob(filepath.Join(dir, "chat", "*.log"))
	assert.Success(t, err)
	assert.Equal(t, "logs left", left, []string(nil))
	_, err = os.Stat(chatFile(dir, threadA+".json"))
	assert.True(t, os.IsNotExist(err), "the document is still there: %v", err)
}

// TestRefusedCreationLeavesNoLog: a post refused before its thread exists
// leaves no log (nor anything else).
func TestRefusedCreationLeavesNoLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{AppendLog: true, MaxThreads: 1})
	appendText(t, s, threadA, "one")
	_, err := s.Append(t.Context(), threadB, store.NewMessage{Text: "refused"})
	assert.Code(t, err, chatrelay.ThreadLimit)
	left, err := filepath.Glob(filepath.Join(dir, "chat", threadB+"*"))
	assert.Success(t, err)
	assert.Equal(t, "files of the refused thread", left, []string(nil))
}

// FuzzParseLog: any bytes parse without a panic; what parses is whole
// lines, and parses again to the same messages; a torn tail is only ever
// the last line.
func FuzzParseLog(f *testing.F) {
	line := `{"id":"MSG-20261023-184000-a1b2c3","epoch":1792780800123,"ts":"2026-10-23T18:40:00+00:00","author":"operator","text":"hi","rev":1792780800123}`
	f.Add([]byte(""))
	f.Add([]byte(line + "\n"))
	f.Add([]byte(line + "\n" + line[:40]))
	f.Add([]byte(line + "\n\x00\x00\n"))
	f.Add([]byte("x\n" + line + "\n"))
	f.Add([]byte(`{"id":"a","epoch":1,"author":"hermes","rev":2}` + "\n"))
	f.Add([]byte(`{"id":"a","epoch":5,"author":"hermes","interaction":{"id":"ix_000000000000","type":"approval","prompt":"?","deadline":9,"state":"pending"}}` + "\n"))
	f.Add([]byte(`{"id":"a","epoch":5,"author":"hermes","unknown":1}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, valid, err := parseLog(data)
		if err != nil {
			return
		}
		if valid < 0 || valid > int64(len(data)) || (valid > 0 && data[valid-1] != '\n') {
			t.Fatalf("valid %d of %d bytes", valid, len(data))
		}
		if tail := data[valid:]; bytes.IndexByte(tail, '\n') >= 0 && bytes.IndexByte(tail, '\n') != len(tail)-1 {
			t.Fatalf("a torn tail of more than one line: %q", tail)
		}
		again, v2, err := parseLog(data[:valid])
		if err != nil || v2 != valid || len(again) != len(msgs) {
			t.Fatalf("the good lines parse to %d messages, %d bytes, %v; first %d, %d", len(again), v2, err, len(msgs), valid)
		}
		for i, e := range msgs {
			if e.ID == "" || e.Author == "" || e.Epoch <= 0 || e.Rev != e.Epoch {
				t.Fatalf("message %d: %+v", i, e.Message)
			}
			m, err := parseLogLine(e.JSON2)
			if err != nil {
				t.Fatalf("message %d does not parse again: %v (%s)", i, err, e.JSON2)
			}
			if !bytes.Equal(store.NewEntry(m).JSON2, e.JSON2) {
				t.Fatalf("message %d: %s then %s", i, e.JSON2, store.NewEntry(m).JSON2)
			}
		}
	})
}

// postThreeLogged posts "one", "two" and "three" to threadA through s
// (AppendLog on, in dir): the first writes the document, the other two
// are the log's two lines.
func postThreeLogged(t *testing.T, s *File, dir string) {
	t.Helper()
	for _, text := range []string{"one", "two", "three"} {
		appendText(t, s, threadA, text)
	}
	assert.Equal(t, "log lines", len(logLines(t, dir, threadA)), 2)
}

// TestLogWithoutDocumentIsNotTheNewThreads: a log whose document was
// removed by hand (or one that does not even parse) adds none of its
// lines to the thread a later post creates, whether the store that
// creates it had the thread cached or not, and goes.
func TestLogWithoutDocumentIsNotTheNewThreads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		cached bool
		bad    bool
	}{{"cached", true, false}, {"fresh store", false, false}, {"log that does not parse", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{AppendLog: true})
			appendText(t, s, threadA, "old one")
			appendText(t, s, threadA, "old two") // to the log
			assert.Equal(t, "the log", len(logLines(t, dir, threadA)), 1)
			assert.Success(t, os.Remove(chatFile(dir, threadA+".json"))) // by hand: the log stays
			if c.bad {
				assert.Success(t, os.WriteFile(chatFile(dir, threadA+".log"), []byte("not a line\n"), 0o600))
			}
			if !c.cached {
				s = openFile(t, dir, FileOptions{AppendLog: true})
			}
			appendText(t, s, threadA, "new")
			assert.Equal(t, "the new thread", texts(mustSince(t, s, threadA)), []string{"new"})
			assert.Equal(t, "the new thread read afresh", freshTexts(t, dir, threadA), []string{"new"})
			_, err := os.Stat(chatFile(dir, threadA+".log"))
			assert.True(t, os.IsNotExist(err), "the old log is still there: %v", err)
		})
	}
}
