package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
)

// TestConformanceAgentLimits: a store holds at most
// chatrelay.LimitActiveAgents.Max active keys: one more is refused with
// agent_limit and leaves nothing (not listed, not resolved), a revoked key
// is not counted, and two stores of the same data adding the last place
// at once accept one. A key whose name or scope is past its limit is
// refused too, whoever made it.
func TestConformanceAgentLimits(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		clk := testclock.New(t0)
		b := Open(t, backend, Options{Now: clk.Now})
		a := agents(t, b)
		other := agents(t, b.Another(t, Options{Now: clk.Now}))
		mk := func(name string) (string, chatrelay.AgentKey) {
			key, k, err := chatrelay.NewAgentKey(name, nil, clk.Now())
			assert.Success(t, err)
			return key, k
		}
		stored := func(want int) {
			t.Helper()
			keys, err := a.AgentKeys(ctx)
			assert.Success(t, err)
			assert.Equal(t, "keys stored", len(keys), want)
		}

		_, long := mk("long")
		long.Name = strings.Repeat("é", chatrelay.LimitAgentName.Max+1)
		assert.Code(t, a.AddAgent(ctx, long), chatrelay.InvalidName)
		_, wide := mk("wide")
		for i := range chatrelay.LimitAgentThreads.Max + 1 {
			wide.Threads = append(wide.Threads, fmt.Sprintf("%016x", i+1))
		}
		assert.Code(t, a.AddAgent(ctx, wide), chatrelay.InvalidThread)
		stored(0)

		max := chatrelay.LimitActiveAgents.Max
		for i := range max - 1 {
			_, k := mk(fmt.Sprint("k", i))
			assert.Success(t, a.AddAgent(ctx, k))
		}
		// Two stores race for the last place: one is accepted.
		_, k1 := mk("first")
		_, k2 := mk("second")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { errs[0] = a.AddAgent(ctx, k1) })
		wg.Go(func() { errs[1] = other.AddAgent(ctx, k2) })
		wg.Wait()
		assert.True(t, (errs[0] == nil) != (errs[1] == nil), "the last place: %v, %v", errs[0], errs[1])
		for _, err := range errs {
			if err != nil {
				assert.Code(t, err, chatrelay.AgentLimit)
			}
		}
		stored(max)

		key, k := mk("one more")
		err := a.AddAgent(ctx, k)
		assert.Code(t, err, chatrelay.AgentLimit)
		assert.True(t, strings.Contains(err.Error(), fmt.Sprint(max)), "the message: %v", err)
		_, err = a.ResolveAgent(ctx, chatrelay.DigestOf(key))
		assert.Code(t, err, chatrelay.Unauthorized)
		stored(max)

		keys, err := a.AgentKeys(ctx)
		assert.Success(t, err)
		_, err = a.RevokeAgent(ctx, keys[len(keys)-1].ID)
		assert.Success(t, err)
		assert.Success(t, other.AddAgent(ctx, k))
		stored(max + 1)
	})
}
