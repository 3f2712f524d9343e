package host_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// TestAgentScope: the verbs of an agent key that names one thread answer
// every other thread as not_found (a thread that exists and one that does
// not alike), list only its thread, wait only on it, and may not open a
// thread; what they write is hermes's with the key's name as author_name
// (v2), while the v1 object is unchanged.
func TestAgentScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := storetest.Open(t, storetest.File, storetest.Options{})
	const mine, other, none = "00000000000000a1", "00000000000000b2", "00000000000000c3"
	for _, th := range []string{mine, other} {
		_, err := b.Store.Append(ctx, th, store.NewMessage{Text: "hello " + th})
		assert.Success(t, err)
	}
	all := &host.Verbs{Store: b.Store}
	_, k, err := chatrelay.NewAgentKey("builder", []string{mine}, time.Now())
	assert.Success(t, err)
	v := all.ForAgent(k)

	list, err := v.ListThreads(ctx, host.ListThreadsInput{})
	assert.Success(t, err)
	assert.Equal(t, "listed", len(list.Threads), 1)
	assert.Equal(t, "listed thread", list.Threads[0].Thread, mine)

	for _, th := range []string{other, none} {
		_, err = v.ReadThread(ctx, host.ReadThreadInput{Thread: th})
		assert.Code(t, err, chatrelay.NotFound)
		_, err = v.Send(ctx, host.SendInput{Thread: th, Text: "hi"})
		assert.Code(t, err, chatrelay.NotFound)
		_, err = v.RequestApproval(ctx, host.RequestApprovalInput{Thread: th, Summary: "deploy?"})
		assert.Code(t, err, chatrelay.NotFound)
		_, err = v.WaitMessages(ctx, host.WaitMessagesInput{Thread: th, Timeout: 1})
		assert.Code(t, err, chatrelay.NotFound)
	}
	_, err = v.OpenThread(ctx, host.OpenThreadInput{Title: "new"})
	assert.Code(t, err, chatrelay.NotPermitted)

	// Without since, "any thread" is the key's threads only.
	w, err := v.WaitMessages(ctx, host.WaitMessagesInput{Timeout: 1})
	assert.Success(t, err)
	assert.Equal(t, "unanswered messages in scope", len(w.Messages), 1)
	assert.Equal(t, "their thread", w.Messages[0].Thread, mine)

	sent, err := v.Send(ctx, host.SendInput{Thread: mine, Text: "on it"})
	assert.Success(t, err)
	var m map[string]any
	assert.Success(t, json.Unmarshal(sent.Message, &m))
	assert.True(t, m["author"] == "hermes" && m["author_name"] == "builder", "v2 message %v", m)
	p, err := b.Store.Since(ctx, mine, 0, 0)
	assert.Success(t, err)
	last := p.Messages[len(p.Messages)-1]
	assert.Equal(t, "the v1 object", string(last.JSON), string(chatrelay.MarshalMessage(chatrelay.Message{ID: last.ID, Epoch: last.Epoch, TS: last.TS, Author: chatrelay.Hermes, Text: "on it"})))

	// A message the person writes in another thread does not wake it,
	// nor is it in the answer.
	res := make(chan host.WaitMessagesResult, 1)
	go func() {
		r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Since: last.Epoch, Timeout: 10})
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	_, err = b.Store.Append(ctx, other, store.NewMessage{Text: "not yours"})
	assert.Success(t, err)
	_, err = b.Store.Append(ctx, mine, store.NewMessage{Text: "yours"})
	assert.Success(t, err)
	r := recv(t, res, "the wait")
	assert.True(t, !r.TimedOut && len(r.Messages) == 1 && r.Messages[0].Thread == mine, "woken with %+v", r)
}
