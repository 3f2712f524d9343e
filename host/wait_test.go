package host_test

import (
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestWaitMessagesWithoutSince: with no cursor, wait_messages answers at
// once with what hermes has not answered: in a thread, the messages after
// hermes's newest one (all of them in a thread hermes never wrote in); of
// every thread, all of those, oldest first. Its cursor is the newest
// epoch, so that passing it back waits for what comes next. With nothing
// to answer it waits, and the next message ends the wait.
func TestWaitMessagesWithoutSince(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	clock := time.Now()
	tick := func() time.Time { // a second a message, so that epochs follow the posting order across threads
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	st, err := store.OpenFile(t.TempDir(), store.FileOptions{NoFsync: true, Now: tick, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	v := &host.Verbs{Store: st}
	const a, b, c = "00000000000000a1", "00000000000000b2", "00000000000000c3"
	post := func(thread string, author chatrelay.Author, text string) store.Entry {
		t.Helper()
		e, err := st.Append(ctx, thread, store.NewMessage{Author: author, Text: text})
		assert.Success(t, err)
		return e
	}
	post(a, chatrelay.Operator, "first question")
	post(a, chatrelay.Hermes, "first answer")
	post(a, chatrelay.Operator, "second question")
	post(b, chatrelay.Operator, "hello?")
	a3 := post(a, chatrelay.Operator, "and a third")
	post(c, chatrelay.Operator, "done?")
	c2 := post(c, chatrelay.Hermes, "done.")
	texts := func(r host.WaitMessagesResult) []string {
		t.Helper()
		out := []string{}
		for _, m := range r.Messages {
			var msg chatrelay.Message
			assert.Success(t, json.Unmarshal(m.Message, &msg))
			out = append(out, m.Thread+": "+msg.Text)
		}
		return out
	}

	r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: a, Timeout: 1})
	assert.Success(t, err)
	assert.Equal(t, "thread a's unanswered", texts(r), []string{a + ": second question", a + ": and a third"})
	assert.Equal(t, "timed out", r.TimedOut, false)
	assert.Equal(t, "cursor", r.Cursor, a3.Epoch)

	r, err = v.WaitMessages(ctx, host.WaitMessagesInput{Timeout: 1})
	assert.Success(t, err)
	assert.Equal(t, "every thread's unanswered", texts(r), []string{a + ": second question", b + ": hello?", a + ": and a third"})
	assert.Equal(t, "cursor", r.Cursor, c2.Epoch)

	r, err = v.WaitMessages(ctx, host.WaitMessagesInput{Thread: c, Timeout: 1})
	assert.Success(t, err)
	assert.Equal(t, "nothing to answer in c", [3]any{len(r.Messages), r.TimedOut, r.Cursor}, [3]any{0, true, c2.Epoch})

	waited := make(chan host.WaitMessagesResult, 1)
	go func() {
		r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: c, Timeout: 60})
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	c3 := post(c, chatrelay.Operator, "one more thing")
	select {
	case r := <-waited:
		assert.Equal(t, "the next message", texts(r), []string{c + ": one more thing"})
		assert.Equal(t, "cursor", r.Cursor, c3.Epoch)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end on the next message")
	}
}
