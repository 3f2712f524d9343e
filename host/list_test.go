package host_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// TestListThreadsUnreadableThread: list_threads (MCP's
// chatrelay_list_threads) lists every thread it can read and names the one
// it cannot, with the code a read of it answers, within the agent's scope.
// Before, a thread file the store could not read (here a folder in place
// of its log: tests run as root, whom chmod 000 does not stop) failed the
// whole list with store_unavailable.
func TestListThreadsUnreadableThread(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := storetest.Open(t, storetest.File, storetest.Options{})
	const good, bad = "00000000000000a1", "00000000000000b2"
	for _, th := range []string{good, bad} {
		_, err := b.Store.Append(ctx, th, store.NewMessage{Text: "hello " + th})
		assert.Success(t, err)
	}
	assert.Success(t, os.Mkdir(filepath.Join(b.Dir, "chat", bad+".log"), 0o700))
	b = b.Another(t, storetest.Options{}) // a process that reads the folder anew (the host CLI, an MCP server)

	r, err := (&host.Verbs{Store: b.Store}).ListThreads(ctx, host.ListThreadsInput{})
	assert.Success(t, err)
	assert.Equal(t, "threads listed", len(r.Threads), 1)
	assert.Equal(t, "the readable thread", r.Threads[0].Thread, good)
	assert.Equal(t, "threads named", r.Unreadable, []host.UnreadableThread{{Thread: bad, Code: chatrelay.StoreUnavailable}})
	js, err := json.Marshal(r)
	assert.Success(t, err)
	schematest.Valid(t, "list_threads.result", js)

	scoped := &host.Verbs{Store: b.Store, Reaches: func(th string) bool { return th == good }}
	r, err = scoped.ListThreads(ctx, host.ListThreadsInput{})
	assert.Success(t, err)
	assert.Equal(t, "an agent's list names no thread out of its scope", len(r.Unreadable), 0)
}
