package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// mcpPost sends one JSON-RPC message to /mcp as the Python and TypeScript
// SDKs' Streamable HTTP clients do, and returns the answer.
func mcpPost(t *testing.T, base, key, session, body string) *http.Response {
	t.Helper()
	if session == "" {
		return mcpDo(t, http.MethodPost, base, key, body)
	}
	return mcpDo(t, http.MethodPost, base, key, body, "Mcp-Session-Id", session, "MCP-Protocol-Version", "2025-06-18")
}

// mcpDo sends an MCP request with key, a JSON body and an Accept of both
// types; header (name, value pairs) sets more headers, or others.
func mcpDo(t *testing.T, method, base, key, body string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, base+chatrelay.PathMCP, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	return resp
}

// mcpInitialize is an MCP initialize request (id 1).
const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// TestMCPRevokeAnswersTheCallInFlight: the Python (mcp 1.29) and
// TypeScript (1.32.2) SDKs' clients, whose key was revoked while a wait
// (with no progress token, their default) was in flight, were left
// waiting for their own request timeout: the call's event stream ended
// with no answer. The call must be answered, on its own stream, with the
// tool error token_revoked, within the revoke's second.
func TestMCPRevokeAnswersTheCallInFlight(t *testing.T) {
	t.Parallel()
	b := ownBackend(t, storetest.File)
	sa := b.CLIArgs()
	n := serveMCP(t, sa, "--mcp-calls-per-key", "1")
	owner := opsToken("mcp revoke answer")
	thread := chatrelay.ThreadOf(owner)
	assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
	key, id := addAgent(t, sa, "doomed")

	resp := mcpPost(t, n.base, key, "", mcpInitialize)
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	assert.True(t, resp.StatusCode == 200 && session != "", "initialize: %d, session %q", resp.StatusCode, session)
	resp = mcpPost(t, n.base, key, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	assert.Equal(t, "initialized", resp.StatusCode, 202)

	type answer struct {
		line string
		err  error
		at   time.Time
	}
	got := make(chan answer, 1)
	// wait sends the wait and reads its answer. A probe below that came
	// first holds the key's one call: the wait is then refused, and sent
	// again.
	wait := func() (answer, bool) {
		resp := mcpPost(t, n.base, key, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+
			chatrelay.ToolName("wait_messages")+`","arguments":{"thread":"`+thread+`","since":1125899906842624,"timeout":60}}}`)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, `"id":2`) {
				return answer{line: data, at: time.Now()}, strings.Contains(data, `"code":"too_many_streams"`)
			}
		}
		return answer{err: sc.Err(), at: time.Now()}, false
	}
	go func() {
		for {
			if a, refused := wait(); !refused {
				got <- a
				return
			}
		}
	}()
	// The wait is in flight once the key's one call in flight
	// (--mcp-calls-per-key 1) is taken: another call is refused.
	probe := 10
	assert.Eventually(t, 10*time.Second, "the wait is in flight", func() bool {
		probe++
		resp := mcpPost(t, n.base, key, session, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":{}}}`,
			probe, chatrelay.ToolName("list_threads")))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"code":"too_many_streams"`)
	})

	assert.Success(t, runCLI(t, nil, "", append([]string{"agent", "revoke", id, "--fsync", "never"}, sa...)...).err)
	revoked := revokedAt(t, b, id)
	var a answer
	select {
	case a = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight got no answer 10 s after the revoke")
	}
	assert.True(t, a.line != "", "the call's stream ended with no answer (%v)", a.err)
	var msg struct {
		Result struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Code chatrelay.Code `json:"code"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	assert.Success(t, json.Unmarshal([]byte(a.line), &msg))
	assert.True(t, msg.Result.IsError && msg.Result.StructuredContent.Code == chatrelay.TokenRevoked,
		"the call's answer: %s", a.line)
	// revoked_at is in whole milliseconds: a millisecond more.
	took := a.at.Sub(revoked) - time.Millisecond
	assert.True(t, took <= time.Second, "answered %v after the revoke was stored", took)
}
