package filestore_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// drain takes every due event of dest and settles it, returning the
// texts of their messages, each as often as it was taken.
func drain(t *testing.T, st *filestore.File, dest string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for {
		due, err := st.Outbox().Take(t.Context(), dest, time.Now(), 100)
		assert.Success(t, err)
		if len(due) == 0 {
			return got
		}
		for _, d := range due {
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(d.Message, &m))
			got[m.Text]++
			assert.Success(t, st.Outbox().Done(t.Context(), dest, d))
		}
	}
}

// Writers killed with SIGKILL at any point of their loop leave a queue
// whose events are exactly the stored messages: no stored message without
// its event (the event is written first), no event of a message that was
// not stored (the deliverer confirms each against the thread and drops
// the rest), none twice.
func TestKilledWriterQueuesEveryStoredChange(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const thread, dest = "c0ffee00c0ffee01", "0123456789abcdef"
	for round, killAfter := range []int{5, 17, 31, 44} {
		w := startChild(t, "crash", data, thread, fmt.Sprint("crash", round), "CHATRELAY_TEST_HOOKS="+dest)
		w.start.Close()
		n := 0
		sc := bufio.NewScanner(w.out)
		for sc.Scan() {
			if n++; n == killAfter {
				assert.Success(t, w.cmd.Process.Kill())
			}
		}
		w.cmd.Wait()
	}
	stored := storedMessages(t, data, thread)
	st, err := filestore.OpenFile(data, filestore.FileOptions{Log: slog.New(slog.DiscardHandler), Webhooks: []string{dest}})
	assert.Success(t, err)
	defer st.Close()
	got := drain(t, st, dest)
	for text := range stored {
		assert.Equal(t, "events of stored message "+text, got[text], 1)
	}
	for text := range got {
		_, ok := stored[text]
		assert.True(t, ok, "an event of %q, which was never stored", text)
	}
}

// An event whose change is not in the document (a writer that died
// between the queue and the document) is dropped; a torn line is
// skipped and does not spoil the next one; a settled queue stays settled
// across a reopen.
func TestQueueConfirmsAgainstTheThread(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const thread, dest = "c0ffee00c0ffee02", "0123456789abcdef"
	opt := filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler), Webhooks: []string{dest}}
	st, err := filestore.OpenFile(data, opt)
	assert.Success(t, err)
	_, err = st.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Operator, Text: "stored"})
	assert.Success(t, err)

	// A line of a change that was never stored, then a torn line, then a
	// whole line of a stored message (written by hand, as a writer would).
	q := filepath.Join(data, "webhooks", dest+".queue")
	raw, err := os.ReadFile(q)
	assert.Success(t, err)
	lines := strings.SplitAfter(string(raw), "\n")
	ghost := strings.Replace(strings.Replace(lines[1], `"stored"`, `"ghost"`, 1), `"id":"evt_`, `"id":"evt_0`, 1)
	ghost = strings.Replace(ghost, `"id":"MSG-`, `"id":"MSG-X`, 1)
	f, err := os.OpenFile(q, os.O_APPEND|os.O_WRONLY, 0o600)
	assert.Success(t, err)
	f.WriteString(ghost + `{"id":"evt_torn","ty`)
	f.Close()
	_, err = st.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Operator, Text: "after the tear"})
	assert.Success(t, err)

	got := drain(t, st, dest)
	assert.Equal(t, "events", got, map[string]int{"stored": 1, "after the tear": 1})
	assert.Success(t, st.Close())

	st, err = filestore.OpenFile(data, opt)
	assert.Success(t, err)
	defer st.Close()
	assert.Equal(t, "after a reopen", drain(t, st, dest), map[string]int{})
}

// Once every event of a queue is settled, the queue file holds none of
// them: a delivered event's message text (the stored, unredacted text,
// which the sweep may remove with its thread long before) stays in no
// file until a megabyte of events has piled up (a queue emptied within
// the last 10 s waits for them to pass). The next event is queued and
// delivered as ever, and a reopened store sends nothing again.
func TestQueueKeepsNoSettledText(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const thread, dest = "c0ffee00c0ffee03", "0123456789abcdef"
	clk := testclock.New(time.Now())
	opt := filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler), Webhooks: []string{dest}, Now: clk.Now}
	st, err := filestore.OpenFile(data, opt)
	assert.Success(t, err)
	_, err = st.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Operator, Text: "password=hunter2"})
	assert.Success(t, err)
	assert.Equal(t, "events", drain(t, st, dest), map[string]int{"password=hunter2": 1})
	q := filepath.Join(data, "webhooks", dest+".queue")
	raw, err := os.ReadFile(q)
	assert.Success(t, err)
	assert.True(t, !strings.Contains(string(raw), "hunter2"), "the queue keeps a delivered event's text: %q", raw)

	_, err = st.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Operator, Text: "password=next"})
	assert.Success(t, err)
	assert.Equal(t, "the next event", drain(t, st, dest), map[string]int{"password=next": 1})
	clk.Advance(10 * time.Second)
	due, err := st.Outbox().Take(t.Context(), dest, time.Now(), 100)
	assert.Success(t, err)
	assert.Equal(t, "due", len(due), 0)
	raw, err = os.ReadFile(q)
	assert.Success(t, err)
	assert.True(t, !strings.Contains(string(raw), "password="), "the queue keeps a delivered event's text 10 s on: %q", raw)
	assert.Success(t, st.Close())
	st, err = filestore.OpenFile(data, opt)
	assert.Success(t, err)
	defer st.Close()
	assert.Equal(t, "after a reopen", drain(t, st, dest), map[string]int{})
}
