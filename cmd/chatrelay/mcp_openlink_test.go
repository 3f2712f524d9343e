package main

import (
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestMCPOpenThreadLinkOverHTTP: over MCP HTTP, open_thread's claim link
// starts with the address the agent reached the server at when serve has
// no --public-url, as share and device links do (it was the path alone,
// "/#t=…", a link no person can open); with --public-url, that.
func TestMCPOpenThreadLinkOverHTTP(t *testing.T) {
	t.Parallel()
	for _, public := range []string{"", "https://chat.example.com/spaces/x"} {
		storeArgs := mcpStoreArgs(t, "file")
		var args []string
		if public != "" {
			args = []string{"--public-url", public}
		}
		n := serveMCP(t, storeArgs, args...)
		key, _ := addAgent(t, storeArgs, "opener")
		cs := mcpClient(t, n.base, key, nil)
		var out struct{ Thread, Link string }
		structured(t, callTool(t, cs, "open_thread", map[string]any{"title": "Deploy 412"}), &out)
		want := public
		if want == "" {
			want = n.base
		}
		assert.True(t, strings.HasPrefix(out.Link, want+"/#t=") && len(out.Link) == len(want)+4+64, "public URL %q: the link %q (the server at %s)", public, out.Link, n.base)
	}
}
