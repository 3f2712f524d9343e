package redisstore

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestRedirectForgetsAClosedNodeClient: a MOVED (or ASK) naming a node
// whose client go-redis closed (the node left the cluster: its GC closes
// the client, and nodeClients kept it) is sent by slot, as to a node the
// client does not know, and the closed client is forgotten; it was sent
// to the closed client, which answered "redis: client is closed" (nothing
// sent), and the call failed (503) where the slot's node would have
// answered. No connection is made: the client is closed before any use.
func TestRedirectForgetsAClosedNodeClient(t *testing.T) {
	t.Parallel()
	const addr = "127.0.0.1:37999" // never dialed
	gone := redis.NewClient(&redis.Options{Addr: addr})
	assert.Success(t, gone.Close())
	ctx, cancel := context.WithTimeout(t.Context(), redirectMaxBackoff*redirectRounds)
	defer cancel()
	for _, refusal := range []string{"MOVED 1234 " + addr, "ASK 1234 " + addr} {
		nodes := &nodeClients{m: map[string]*redis.Client{addr: gone}}
		h := redirectHook{nodes: nodes}
		cmd := redis.NewStringCmd(ctx, "get", "k")
		cmd.SetErr(errorReply(refusal))
		var bySlot int
		h.follow(ctx, []redis.Cmder{cmd}, func(_ context.Context, cmds []redis.Cmder) {
			bySlot++
			for _, c := range cmds {
				c.SetErr(nil)
				c.(*redis.StringCmd).SetVal("answered by the slot's node")
			}
		})
		assert.True(t, cmd.Err() == nil && cmd.Val() == "answered by the slot's node", "%s: the command's answer: %q, %v", refusal, cmd.Val(), cmd.Err())
		assert.Equal(t, refusal+": sent by slot", bySlot, 1)
		assert.True(t, nodes.get(addr) == nil, "%s: the closed client is kept", refusal)
	}
}

// TestRedirectTxForgetsAClosedNodeClient: a MULTI/EXEC told MOVED to a
// node whose client is closed goes by slot (next), whole, and the closed
// client is forgotten; it failed "redis: client is closed".
func TestRedirectTxForgetsAClosedNodeClient(t *testing.T) {
	t.Parallel()
	const addr = "127.0.0.1:37998" // never dialed
	gone := redis.NewClient(&redis.Options{Addr: addr})
	assert.Success(t, gone.Close())
	ctx, cancel := context.WithTimeout(t.Context(), redirectMaxBackoff*redirectRounds)
	defer cancel()
	nodes := &nodeClients{m: map[string]*redis.Client{addr: gone}}
	h := redirectHook{nodes: nodes}
	get := redis.NewStringCmd(ctx, "get", "k")
	get.SetErr(errorReply("MOVED 1234 " + addr))
	wire := []redis.Cmder{redis.NewStatusCmd(ctx, "multi"), get, redis.NewSliceCmd(ctx, "exec")}
	var bySlot int
	sent := h.followTx(ctx, wire, func(_ context.Context, cmds []redis.Cmder) error {
		bySlot++
		get.SetErr(nil)
		get.SetVal("answered by the slot's node")
		return nil
	})
	assert.True(t, sent && get.Err() == nil && get.Val() == "answered by the slot's node", "the command's answer: %q, %v", get.Val(), get.Err())
	assert.Equal(t, "sent by slot", bySlot, 1)
	assert.True(t, nodes.get(addr) == nil, "the closed client is kept")
}
