package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/mcpserver"
)

// TestMCPCallsPerKey: a key's tool calls in flight on a node, its
// sessions together, are bounded by --mcp-calls-per-key: with two waits
// of the key blocked (one per session), its next call, a read, is
// refused too_many_streams, retryable, while another key's is not; once
// a wait returns, the key's calls go through again.
func TestMCPCallsPerKey(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa, "--mcp-calls-per-key", "2")
	owner := opsToken("mcp calls per key")
	thread := chatrelay.ThreadOf(owner)
	assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
	key, _ := addAgent(t, sa, "waiter")
	sessions := []*mcp.ClientSession{mcpClient(t, n.base, key, nil), mcpClient(t, n.base, key, nil)}
	other, _ := addAgent(t, sa, "other")
	otherCS := mcpClient(t, n.base, other, nil)

	waits := make([]context.CancelFunc, len(sessions))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, cs := range sessions {
		ctx, cancel := context.WithCancel(t.Context())
		waits[i] = cancel
		defer cancel()
		wg.Go(func() {
			// A wait that came while the key's two places were taken (the
			// other wait and a list_threads of the poll below) is refused:
			// it tries again, so that both waits end up in flight.
			for ctx.Err() == nil {
				r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: chatrelay.ToolName("wait_messages"),
					Arguments: map[string]any{"thread": thread, "since": 1 << 50, "timeout": 120}})
				if err != nil || !r.IsError {
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond): // polls for a free place
				}
			}
		})
	}
	refused := func(cs *mcp.ClientSession) (bool, mcpserver.ToolError) {
		r := callTool(t, cs, "list_threads", map[string]any{})
		var te mcpserver.ToolError
		if r.IsError {
			structured(t, r, &te)
		}
		return r.IsError, te
	}
	var te mcpserver.ToolError
	assert.Eventually(t, 10*time.Second, "a third call of the key refused", func() bool {
		var no bool
		no, te = refused(sessions[0])
		return no
	})
	assert.True(t, te.Code == chatrelay.TooManyStreams && te.Retryable, "the refusal: %+v", te)
	no, te := refused(otherCS)
	assert.True(t, !no, "another key's call: %+v", te)

	waits[1]()
	assert.Eventually(t, 10*time.Second, "the key's call once a wait returned", func() bool {
		no, _ := refused(sessions[0])
		return !no
	})
}

// TestMCPBoundsStated: GET /api/limits.json states the node's MCP bounds
// as its flags set them.
func TestMCPBoundsStated(t *testing.T) {
	t.Parallel()
	n := serveMCP(t, []string{"--data", t.TempDir()}, "--mcp-sessions", "40", "--mcp-calls-per-key", "5", "--mcp-idle", "90s")
	res, err := http.Get(n.base + chatrelay.PathLimits)
	assert.Success(t, err)
	defer res.Body.Close()
	var a struct {
		MCP struct {
			Sessions       int     `json:"sessions"`
			SessionsPerKey int     `json:"sessions_per_key"`
			CallsPerKey    int     `json:"calls_per_key"`
			IdleSeconds    float64 `json:"idle_seconds"`
		}
	}
	assert.Success(t, json.NewDecoder(res.Body).Decode(&a))
	assert.Equal(t, "the stated bounds", [4]any{a.MCP.Sessions, a.MCP.SessionsPerKey, a.MCP.CallsPerKey, a.MCP.IdleSeconds},
		[4]any{40, chatrelay.DefaultMCPSessionsPerKey, 5, 90.0})
}
