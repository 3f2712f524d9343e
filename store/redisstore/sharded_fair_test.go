package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// TestShardedCreationLockHandedOver: two nodes that both keep creating
// threads take the creation lock in turn: a node whose turn ended, with a
// post of its own next, yields the lock to the other node's waiting post.
// The node whose turn just ended took the lock back first (its next post
// asked at once, the other's polled every 20 ms), so that the other
// node's posts waited through the first node's whole burst, and past the
// wait's bound (20 s) were refused store_unavailable.
func TestShardedCreationLockHandedOver(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	opt := Options{Prefix: prefix, Timeout: 2 * time.Second}
	nodes := []*Sharded{openSharded(t, spec, opt), openSharded(t, spec, opt)}
	const turns = 120
	var mu sync.Mutex
	var holders []int // the node of each turn, in order
	for i, sh := range nodes {
		sh.turn = func() {
			mu.Lock()
			holders = append(holders, i)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // the holder's work
		}
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var seq atomic.Int64
	var wg sync.WaitGroup
	for i := range 2 {
		for range 4 { // each node has a post waiting whenever one of its own is served
			wg.Go(func() {
				for ctx.Err() == nil {
					_, err := nodes[i].Append(ctx, fmt.Sprintf("%016x", 0xfa170000+seq.Add(1)), store.NewMessage{Text: "new"})
					if c := chatrelay.CodeOf(err); err != nil && ctx.Err() == nil {
						t.Errorf("node %d: a creating post: %s %v", i, c, err)
						return
					}
					mu.Lock()
					enough := len(holders) >= turns
					mu.Unlock()
					if enough {
						stop()
					}
				}
			})
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	longest, run := 0, 0
	for i, h := range holders {
		if i > 0 && h == holders[i-1] {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
	}
	count := [2]int{}
	for _, h := range holders {
		count[h]++
	}
	t.Logf("%d turns: node 0 %d, node 1 %d; the longest run of one node's turns %d", len(holders), count[0], count[1], longest)
	if longest > 3 {
		t.Errorf("a node held the creation lock %d turns in a row while the other node's posts waited: %v", longest, holders)
	}
}
