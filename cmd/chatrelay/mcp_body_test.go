package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestMCPBodyPastItsLimit: an MCP request body past chatrelay.MaxMCPBody
// (a tool call carrying a file of a few MiB, base64) is the API's JSON
// 413 body_too_large, with its code, whether its length is declared or
// it comes chunked; it was the SDK's plain-text "request body exceeds
// 1048576 bytes", which no client could tell from any other failure.
func TestMCPBodyPastItsLimit(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	key, _ := addAgent(t, sa, "builder")
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chatrelay_send","arguments":{"thread":"0123456789abcdef","text":"` +
		strings.Repeat("a", chatrelay.MaxMCPBody) + `"}}}`
	for _, chunked := range []bool{false, true} {
		var r io.Reader = strings.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // no length known: sent chunked
		}
		resp, b := postMCP(t, n.base, key, r)
		assert.True(t, resp.StatusCode == 413 && strings.Contains(string(b), `"code":"body_too_large"`),
			"chunked %v: %d %s", chunked, resp.StatusCode, b)
	}
}

// postMCP POSTs body to the MCP route of the server at base with the
// agent key, as the SDKs do, and returns the answer and its body.
func postMCP(t *testing.T, base, key string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+chatrelay.PathMCP, body)
	assert.Success(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}
