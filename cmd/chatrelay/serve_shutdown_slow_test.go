package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestServeShutdownWithASlowMCPBody: an agent's MCP request whose body is
// still arriving (sent slowly, or stalled) when serve gets SIGTERM. The
// read is cut at the end of the shutdown's grace: the request is answered
// 503 store_unavailable (retryable), and run returns nil within its 5 s.
// Before the fix the handler read on until the 30 s ReadTimeout, the
// client got no answer, and serve exited 1 with "context deadline
// exceeded".
func TestServeShutdownWithASlowMCPBody(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, _ := addAgent(t, []string{"--data", dir}, "slow")
	srv := runServe(t, "--data", dir, "--mcp", "--log-level", "error")

	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.base, "http://"))
	assert.Success(t, err)
	defer conn.Close()
	// Expect: 100-continue: the server says "100 Continue" once the
	// handler reads the body, so the request is known to be in its hands.
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n", chatrelay.PathMCP, key)
	assert.Success(t, err)
	assert.Success(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	assert.Success(t, err)
	assert.True(t, strings.HasPrefix(line, "HTTP/1.1 100 "), "the server's first line: %q", line)
	_, err = br.ReadString('\n') // the blank line that ends the 100
	assert.Success(t, err)
	_, err = io.WriteString(conn, `{"jsonrpc":`) // and no more
	assert.Success(t, err)

	srv.stopped(t) // SIGTERM: run returns nil within its bound
	resp, err := http.ReadResponse(br, nil)
	assert.Success(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "status of the MCP request cut by the shutdown", resp.StatusCode, http.StatusServiceUnavailable)
	assert.True(t, strings.Contains(string(body), `"code":"store_unavailable"`) && strings.Contains(string(body), `"retryable":true`),
		"the cut request's answer: %s", body)
}
