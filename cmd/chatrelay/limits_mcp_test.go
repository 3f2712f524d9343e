package main

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The walk of mcp.body: an MCP request of exactly the limit is read (an
// initialize, padded with the white space JSON allows), one byte more is
// refused, over HTTP (413 body_too_large) and on stdio (-32600).
func init() {
	walks["mcp.body"] = walk{custom: func(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
		initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"walk","version":"1"}}}`
		padded := func(n int) string { return initialize + strings.Repeat(" ", n-len(initialize)) }

		sa := []string{"--data", t.TempDir()}
		n := serveMCP(t, sa)
		key, _ := addAgent(t, sa, "walker")
		for _, size := range []int{l.Max, l.Max + 1} {
			resp, b := postMCP(t, n.base, key, strings.NewReader(padded(size)))
			if size == l.Max {
				assert.True(t, resp.StatusCode == 200 && resp.Header.Get("Mcp-Session-Id") != "", "HTTP, %d bytes: %d %s", size, resp.StatusCode, b)
			} else {
				assert.True(t, resp.StatusCode == 413 && strings.Contains(string(b), `"code":"body_too_large"`), "HTTP, %d bytes: %d %s", size, resp.StatusCode, b)
			}
		}

		for _, size := range []int{l.Max, l.Max + 1} {
			in, toServer := io.Pipe()
			fromServer, out := io.Pipe()
			conn, err := (&mcpserver.Stdio{In: in, Out: out}).Connect(t.Context())
			assert.Success(t, err)
			go func() { io.WriteString(toServer, padded(size)+"\n") }()
			if size == l.Max {
				msg, err := conn.Read(t.Context())
				assert.Success(t, err)
				req, ok := msg.(*jsonrpc.Request)
				assert.True(t, ok && req.Method == "initialize", "stdio, %d bytes: read %#v", size, msg)
			} else {
				// The refusal is written to Out, and nothing is read.
				sc := bufio.NewScanner(fromServer)
				assert.True(t, sc.Scan(), "stdio, %d bytes: no answer", size)
				assert.True(t, strings.Contains(sc.Text(), `"code":-32600`), "stdio, %d bytes: %s", size, sc.Text())
			}
			conn.Close()
			toServer.Close()
			fromServer.Close()
		}
	}}
}
