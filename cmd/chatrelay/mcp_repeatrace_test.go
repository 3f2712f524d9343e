package main

import (
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPRepeatsAtOnceAreRepeats: an agent that sends one message with
// its client_id several times at once (a retry sent while the first is
// still being stored) gets one stored message and every other call
// answered as its repeat, none the tool's error rate_limited, even when
// the first takes the key's window's last place. probe14 made 10 such
// calls at once with --rate-thread 3 and got up to 8 rate_limited, for a
// message that was stored.
func TestMCPRepeatsAtOnceAreRepeats(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		sa := mcpStoreArgs(t, backend)
		n := serveMCP(t, sa, "--rate-ip", "1", "--mcp-calls-per-key", "16")
		owner := opsToken("mcp repeats at once")
		thread := chatrelay.ThreadOf(owner)
		assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"hello"}`), 201)
		key, _ := addAgent(t, sa, "eager")
		const calls = 10
		var sessions []*mcp.ClientSession // one each: the calls of one session may be run in turn
		for range calls {
			sessions = append(sessions, mcpClient(t, n.base, key, nil))
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		fresh, replays, refused, failed := 0, 0, []string{}, []error{}
		for _, cs := range sessions {
			wg.Go(func() {
				te, replayed, err := sendTool(t.Context(), cs, thread, "once", "c1")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					failed = append(failed, err)
				case te.Code != "":
					refused = append(refused, string(te.Code))
				case replayed:
					replays++
				default:
					fresh++
				}
			})
		}
		wg.Wait()
		assert.Equal(t, "calls that failed", len(failed), 0)
		assert.Equal(t, "refused calls", len(refused), 0)
		assert.Equal(t, "calls that stored", fresh, 1)
		assert.Equal(t, "calls answered as repeats", replays, calls-1)
	})
}
