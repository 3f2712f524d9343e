package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// TestReactNamesABadMessageID: the Python SDK's client called
// chatrelay_react with "message_id": null (a result read under the wrong
// key) and was told "not_found: no message  in this thread", which names
// nothing. A message id that is none is not_found with the id quoted and
// what a message id looks like, as check_interaction says of a bad
// interaction id; nothing is stored.
func TestReactNamesABadMessageID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := storetest.Open(t, storetest.File, storetest.Options{})
	const thread = "00000000000000a1"
	first, err := b.Store.Append(ctx, thread, store.NewMessage{Text: "hello"})
	assert.Success(t, err)
	v := &host.Verbs{Store: b.Store}
	for _, id := range []string{"", "nope", "MSG-2026"} {
		_, err := v.React(ctx, host.ReactInput{Thread: thread, MessageID: id, Emoji: "👍"})
		assert.Code(t, err, chatrelay.NotFound)
		assert.True(t, strings.Contains(err.Error(), `"`+id+`"`) && strings.Contains(err.Error(), "a message id is MSG-"),
			"react to %q: %v", id, err)
	}
	// An id of any length is quoted cut short: the client's string is
	// not answered back whole (an MCP request carries up to 1 MiB).
	long := strings.Repeat("x", 100000)
	_, err = v.React(ctx, host.ReactInput{Thread: thread, MessageID: long, Emoji: "👍"})
	assert.Code(t, err, chatrelay.NotFound)
	assert.True(t, len(err.Error()) < 200, "react to a 100 000-byte id answered %d bytes", len(err.Error()))
	_, err = v.CheckInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: long})
	assert.Code(t, err, chatrelay.NotFound)
	assert.True(t, len(err.Error()) < 200, "check_interaction of a 100 000-byte id answered %d bytes", len(err.Error()))
	page, err := b.Store.Since(ctx, thread, 0, 0)
	assert.Success(t, err)
	assert.True(t, len(page.Messages) == 1 && page.Messages[0].Rev == first.Epoch, "a refused reaction changed the thread: %+v", page.Messages)
}
