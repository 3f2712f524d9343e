package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/mcpserver"
)

// TestRepeatAcrossHTTPAndMCPIsNeverRateLimited: the owner's post over
// HTTP and an agent's chatrelay_send over MCP HTTP, sent at once to one
// server with the same client_id into a thread whose window has one
// place left, store one message, and the other is answered
// client_id_conflict (another author), never rate_limited: no retry of
// it can succeed. probe15 found one in 4 such pairs answered 429 (the
// post, or the tool's error) with a Retry-After of the whole window,
// because the API's posts and MCP's writes waited for their own kind
// only, and the one that came second found the first's place taken
// before the first was stored.
func TestRepeatAcrossHTTPAndMCPIsNeverRateLimited(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		sa := mcpStoreArgs(t, backend)
		n := serveMCP(t, sa, "--rate-thread", "2", "--rate-ip", "1000")
		key, _ := addAgent(t, sa, "twin")
		cs := mcpClient(t, n.base, key, nil)
		const rounds = 20
		for i := range rounds {
			owner := opsToken(fmt.Sprintf("cross api repeat %d", i))
			thread := chatrelay.ThreadOf(owner)
			assert.Equal(t, "the thread's first post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
			var wg sync.WaitGroup
			var status int
			var answer string
			var tool mcpserver.ToolError
			var postErr, toolErr error
			wg.Go(func() {
				status, answer, postErr = personPostAnswer(n.base, owner, chatrelay.PathPost, `{"text":"same","client_id":"c1"}`)
			})
			wg.Go(func() { tool, _, toolErr = sendTool(t.Context(), cs, thread, "same", "c1") })
			wg.Wait()
			assert.Success(t, postErr)
			assert.Success(t, toolErr)
			toolFailed := tool.Code != ""
			assert.True(t, status != http.StatusTooManyRequests, "round %d: the post was answered %d %s", i, status, answer)
			assert.True(t, !toolFailed || tool.Code != chatrelay.RateLimited, "round %d: the MCP send was answered rate_limited: %s", i, tool.Error)
			// One stored, the other refused as another author's repeat.
			assert.True(t, (status == http.StatusCreated) != (!toolFailed), "round %d: post %d, MCP send refused %v (%s): not one stored and one refused", i, status, toolFailed, tool.Code)
			if status != http.StatusCreated {
				assert.Equal(t, "the post's refusal", status, http.StatusConflict)
			} else {
				assert.Equal(t, "the MCP send's refusal", tool.Code, chatrelay.ClientIDConflict)
			}
			assert.Equal(t, "messages with the client_id", storedWith(t, n.base, owner, "c1"), 1)
		}
	})
}

// storedWith counts the thread's messages (the owner's v2 poll) that
// carry clientID.
func storedWith(t *testing.T, base, owner, clientID string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+chatrelay.PathPoll+"?v=2", nil)
	req.Header.Set("X-Chat-Token", owner)
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer resp.Body.Close()
	var page struct {
		Messages []struct {
			ClientID string `json:"client_id"`
		} `json:"messages"`
	}
	assert.Success(t, json.NewDecoder(resp.Body).Decode(&page))
	n := 0
	for _, m := range page.Messages {
		if m.ClientID == clientID {
			n++
		}
	}
	return n
}
