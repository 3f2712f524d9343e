package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// FuzzParseParticipants: a participants record is read from disk, where
// another process (or a person with an editor) may have left anything.
// The reader never panics, and whatever it accepts has every grant
// checkable (id, digest, expiry) and writes back to a record that reads
// the same.
func FuzzParseParticipants(f *testing.F) {
	const thread = "a1b2c3d4e5f60718"
	digest := strings.Repeat("0f", 32)
	for _, s := range []string{
		`{"version":1,"thread":"` + thread + `","grants":[]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","name":"Jo","kind":"human","role":"viewer","created_at":1,"expires_at":2,"cap":0,"sent":0,"digest":"` + digest + `"}]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","expires_at":2,"digest":"` + digest + `","revoked_at":3,"used":true,"expiry_noted":true}]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","expires_at":0,"digest":"` + digest + `"}]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","expires_at":2,"digest":"zz"}]}`,
		`{"version":2,"thread":"` + thread + `","grants":null}`, `{"version":1,"thread":"0000000000000000"}`,
		`{"version":1,"thread":"` + thread + `","grants":[],"x":1}`, `{"version":1,"thread":"` + thread + `"} {}`, `null`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		grants, err := parseParticipants(data, thread)
		if err != nil {
			return
		}
		for i, g := range grants {
			if err := chatrelay.CheckGrant(g); err != nil {
				t.Fatalf("%q: grant %d accepted but %v", data, i, err)
			}
		}
		out, err := json.Marshal(participantsFile{Version: 1, Thread: thread, Grants: grants})
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseParticipants(out, thread)
		if err != nil {
			t.Fatalf("%q re-encodes to %s, which does not parse: %v", data, out, err)
		}
		if len(again) != len(grants) || (len(grants) > 0 && !reflect.DeepEqual(again, grants)) {
			t.Fatalf("%q: grants %+v became %+v", data, grants, again)
		}
	})
}

// FuzzAudit: an audit file may hold anything (a torn line a full disk or
// a crash left, another writer's bytes, an editor's). Reading it never
// fails and gives the events of its whole lines; an event appended to it
// is always read back, after those, and the file's whole lines are kept
// as they were (but past the cut, which keeps what store.KeptAudit keeps).
func FuzzAudit(f *testing.F) {
	const thread = "a1b2c3d4e5f60718"
	issued := `{"at":1,"event":"issued","participant":"p_0011aabb"}`
	for _, s := range []string{
		``, issued + "\n", issued + "\n" + `{"at":2,"event":"refu`, `{"at":2,"event":"refused","participant":"p_0011aabb","co`,
		issued, issued + "\n" + issued, "\n\n", "\xff\n{", `null` + "\n", `{"at":"x","event":"issued"}` + "\n",
		issued + "\n" + `{"event":""}` + "\n" + strings.Repeat("x", 70_000) + "\n" + issued + "\n",
		`{"at":3,"event":"first_use","participant":"p_` + strings.Repeat("a", 70_000) + `"}` + "\n",
		strings.Repeat(issued+"\n", 2*chatrelay.LimitAuditKept.Max) + `{"at":`,
		issued + "\n" + strings.Repeat(`{"at":2,"event":"refused","participant":"p_0011aabb","code":"not_permitted"}`+"\n", 2*chatrelay.LimitAuditKept.Max),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, existing []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "chat", thread+".audit.jsonl")
		s := openFile(t, dir, FileOptions{})
		_, err := s.Append(t.Context(), thread, store.NewMessage{Text: "hello"}) // a thread that has no message keeps no audit
		assert.Success(t, err)
		assert.Success(t, os.WriteFile(path, existing, 0o600))
		// What the file's whole lines hold.
		whole := existing[:bytes.LastIndexByte(existing, '\n')+1]
		var want []chatrelay.AuditEvent
		for line := range bytes.Lines(whole) {
			var e chatrelay.AuditEvent
			if json.Unmarshal(line, &e) == nil && e.Event != "" {
				want = append(want, e)
			}
		}
		kept := store.KeptAudit
		got, err := s.AuditLog(t.Context(), thread)
		assert.Success(t, err)
		// A failure names the file's first bytes and the last events.
		clip := func(b []byte) []byte { return b[:min(len(b), 200)] }
		tail := func(events []chatrelay.AuditEvent) []chatrelay.AuditEvent { return events[max(0, len(events)-2):] }
		if len(got) != len(kept(want)) || (len(got) > 0 && !reflect.DeepEqual(got, kept(want))) {
			t.Fatalf("%q… reads as %d events ending %+v, want %d ending %+v", clip(existing), len(got), tail(got), len(kept(want)), tail(kept(want)))
		}

		ev := chatrelay.AuditEvent{At: 99, Event: chatrelay.AuditRevoked, Participant: "p_0011aabb"}
		assert.Success(t, s.Audit(t.Context(), thread, ev))
		want = kept(append(want, ev))
		got, err = s.AuditLog(t.Context(), thread)
		assert.Success(t, err)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after an append to %q…: %d events ending %+v, want %d ending %+v", clip(existing), len(got), tail(got), len(want), tail(want))
		}
		after, err := os.ReadFile(path)
		assert.Success(t, err)
		line, _ := json.Marshal(ev)
		if bytes.Count(whole, []byte{'\n'}) < 2*chatrelay.LimitAuditKept.Max { // not cut
			assert.True(t, string(after) == string(whole)+string(line)+"\n", "after an append to %q…, the file is %q…", clip(existing), clip(after))
		} else {
			assert.True(t, bytes.HasSuffix(after, append(line, '\n')), "the cut file does not end with the event: …%q", after[max(0, len(after)-200):])
		}
	})
}

// TestAuditIsCut: past twice LimitAuditKept lines the audit file is cut
// to the newest LimitAuditKept, counted across a reopen of the store (a
// server restart) and with lines another process appended; AuditLog
// always gives the newest, oldest first.
func TestAuditIsCut(t *testing.T) {
	t.Parallel()
	const thread = "a1b2c3d4e5f60718"
	kept := chatrelay.LimitAuditKept.Max
	dir := t.TempDir()
	audit := func(s *File, at int) {
		t.Helper()
		if err := s.Audit(t.Context(), thread, chatrelay.AuditEvent{At: int64(at), Event: chatrelay.AuditFirstUse, Participant: "p_0011aabb"}); err != nil {
			t.Fatal(err)
		}
	}
	lines := func() int {
		b, err := os.ReadFile(filepath.Join(dir, "chat", thread+".audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte{'\n'})
	}
	s := openFile(t, dir, FileOptions{NoFsync: true})
	_, err := s.Append(t.Context(), thread, store.NewMessage{Text: "hello"}) // a thread that has no message keeps no audit
	assert.Success(t, err)
	for i := 1; i <= kept; i++ {
		audit(s, i)
	}
	s.Close()
	// Another writer of the folder (the CLI, another store) appends.
	other := openFile(t, dir, FileOptions{NoFsync: true})
	for i := kept + 1; i <= 2*kept-10; i++ {
		audit(other, i)
	}
	s = openFile(t, dir, FileOptions{NoFsync: true}) // counts the file's lines once
	for i := 2*kept - 9; i <= 2*kept; i++ {
		audit(s, i)
	}
	assert.Equal(t, "lines at twice the kept", lines(), 2*kept)
	audit(s, 2*kept+1)
	assert.Equal(t, "lines after the cut", lines(), kept)
	events, err := s.AuditLog(t.Context(), thread)
	assert.Success(t, err)
	assert.Equal(t, "events", len(events), kept)
	assert.Equal(t, "oldest, newest", [2]int64{events[0].At, events[kept-1].At}, [2]int64{int64(kept + 2), int64(2*kept + 1)})
}

// TestOwnGrantsWriteAnnouncedOnce: a record this process writes is
// announced once (by the write), not again when the folder watch sees
// its rename; another process's write is announced. The other process's
// write of a second thread's record comes after in the watch's order,
// so once it is announced, the first record's event was handled.
func TestOwnGrantsWriteAnnouncedOnce(t *testing.T) {
	t.Parallel()
	const a, b = "a1b2c3d4e5f60718", "b1b2c3d4e5f60718"
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{NoFsync: true})
	other := openFile(t, dir, FileOptions{NoFsync: true})
	for _, th := range []string{a, b} {
		appendText(t, s, th, "hello")
	}
	var mu sync.Mutex
	count := map[string]int{}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(ctx, func(bt store.Batch) {
			if bt.Ready {
				close(ready)
			}
			if bt.Participants {
				mu.Lock()
				count[bt.Thread]++
				mu.Unlock()
			}
		})
	}()
	defer func() { cancel(); <-done }()
	<-ready
	grant := func(id string) chatrelay.Grant {
		return chatrelay.Grant{ID: id, Name: "Jo", Kind: chatrelay.Human, Role: chatrelay.Viewer, CreatedAt: 1,
			ExpiresAt: time.Now().Add(time.Hour).UnixMilli(), Digest: strings.Repeat("0f", 31) + id[len(id)-2:]}
	}
	assert.Success(t, s.Invite(t.Context(), a, grant("p_0011aabb")))
	assert.Success(t, other.Invite(t.Context(), b, grant("p_0011aacc")))
	assert.Eventually(t, 10*time.Second, "another process's write of a record announced", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return count[b] > 0
	})
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "announcements of this process's own write", count[a], 1)
}
