package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/mcpserver"
)

// TestOpenClientID: `chatrelay open --client-id K` run again (its output
// lost: a dropped connection, a killed terminal) prints the same thread
// and link, says replayed, and makes nothing new; with another text it is
// refused client_id_conflict. Before, --client-id was no flag of open, and
// every run made a thread of its own.
func TestOpenClientID(t *testing.T) {
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			b := ownBackend(t, backend)
			args := append([]string{"open", "--title", "Deploy 412", "--text", "Shall I deploy?", "--client-id", "deploy-412", "--public-url", "https://chat.example.com"}, b.CLIArgs()...)
			type result struct {
				Thread   string `json:"thread"`
				Link     string `json:"link"`
				Replayed bool   `json:"replayed"`
			}
			var first, again result
			r := runCLI(t, nil, "", args...)
			assert.Success(t, r.err)
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &first))
			r = runCLI(t, nil, "", args...)
			assert.Success(t, r.err)
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &again))
			assert.Equal(t, "the second run", again, result{Thread: first.Thread, Link: first.Link, Replayed: true})
			assert.True(t, !first.Replayed, "the first run says replayed")
			assert.Equal(t, "threads", b.Threads(t), []string{first.Thread})
			p, err := b.Store.Changes(t.Context(), first.Thread, 0, 0)
			assert.Success(t, err)
			assert.Equal(t, "messages", len(p.Messages), 1)
			token := strings.TrimPrefix(first.Link, "https://chat.example.com/#t=")
			assert.True(t, chatrelay.ValidToken(token), "the link %q", first.Link)
			for where, data := range stored(t, b) {
				assert.True(t, !strings.Contains(data, token), "%s holds the token", where)
			}

			other := append([]string{"open", "--title", "Deploy 412", "--text", "Shall I roll back?", "--client-id", "deploy-412"}, b.CLIArgs()...)
			r = runCLI(t, nil, "", other...)
			assert.Equal(t, "another text: exit", exitCode(r.err), 1)
			assert.Equal(t, "another text: code", chatrelay.CodeOf(r.err), chatrelay.ClientIDConflict)
			assert.Equal(t, "threads after the conflict", b.Threads(t), []string{first.Thread})
		})
	}
}

// TestMCPOpenThreadClientID: over MCP HTTP, two agent keys that use the
// same client_id open two threads, and a key's repeat answers its own
// thread and link again without counting in its window (--rate-ip 2: the
// repeat, then another new thread, both pass; a repeat past the full
// window is answered too).
func TestMCPOpenThreadClientID(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		sa := mcpStoreArgs(t, backend)
		n := serveMCP(t, sa, "--rate-ip", "2")
		keyA, _ := addAgent(t, sa, "one")
		keyB, _ := addAgent(t, sa, "two")
		a, bb := mcpClient(t, n.base, keyA, nil), mcpClient(t, n.base, keyB, nil)
		type result struct {
			Thread   string `json:"thread"`
			Link     string `json:"link"`
			Replayed bool   `json:"replayed"`
		}
		args := map[string]any{"text": "hello", "client_id": "job-1"}
		var ra, ra2, rb, rc result
		r := callTool(t, a, "open_thread", args)
		assert.True(t, !r.IsError, "open_thread: %+v", r)
		structured(t, r, &ra)
		r = callTool(t, a, "open_thread", args)
		assert.True(t, !r.IsError, "the repeat: %+v", r)
		structured(t, r, &ra2)
		assert.Equal(t, "the repeat", ra2, result{Thread: ra.Thread, Link: ra.Link, Replayed: true})
		r = callTool(t, a, "open_thread", map[string]any{"text": "another"})
		assert.True(t, !r.IsError, "a second new thread in a window of 2 after a repeat: %+v", r)
		structured(t, r, &rc)
		// The key's window is full now; a repeat stores nothing, and is
		// answered all the same, as a post's is.
		var ra3 result
		r = callTool(t, a, "open_thread", args)
		assert.True(t, !r.IsError, "a repeat over a full window: %+v", r)
		structured(t, r, &ra3)
		assert.Equal(t, "the repeat over a full window", ra3, ra2)
		r = callTool(t, bb, "open_thread", args)
		assert.True(t, !r.IsError, "the other key: %+v", r)
		structured(t, r, &rb)
		assert.True(t, rb.Thread != ra.Thread && !rb.Replayed, "the other key got %+v, the first %+v", rb, ra)
		r = callTool(t, bb, "open_thread", map[string]any{"text": "changed", "client_id": "job-1"})
		var te mcpserver.ToolError
		structured(t, r, &te)
		assert.True(t, r.IsError && te.Code == chatrelay.ClientIDConflict, "another text with the client_id: %+v", te)
	})
}
