package storetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/redis/go-redis/v9"
)

// The agent keys part of the conformance suite (contract Part 5, MCP from
// anywhere).

func agents(t *testing.T, b *Backend) store.Agents {
	t.Helper()
	a, ok := b.Store.(store.Agents)
	if !ok {
		t.Fatalf("the %s store keeps no agent keys", b.Name)
	}
	return a
}

// TestConformanceAgents: keys are added, listed newest first, resolved by
// their digest from another store of the same data (the key itself is
// never kept), revoked (once; again changes nothing), and every change,
// by this store or another, is announced on the feed as an Agents batch.
func TestConformanceAgents(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		clk := testclock.New(t0)
		b := Open(t, backend, Options{Now: clk.Now})
		a := agents(t, b)
		other := b.Another(t, Options{Now: clk.Now})

		// A feed of another store of the same data sees every change.
		seen := make(chan struct{}, 16)
		fctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		ready := make(chan struct{})
		go func() {
			defer close(done)
			store.NewFeed(other.Store).Follow(fctx, store.AgentsTopic, func(bt store.Batch) error {
				switch {
				case bt.Ready:
					close(ready)
				case bt.Agents && bt.Thread == store.AgentsTopic:
					seen <- struct{}{}
				}
				return nil
			})
		}()
		defer func() { stop(); <-done }()
		<-ready
		drain := func() {
			for len(seen) > 0 {
				<-seen
			}
		}
		announced := func(what string) {
			t.Helper()
			select {
			case <-seen:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s was not announced on the other store's feed", what)
			}
		}
		drain()

		keys, err := a.AgentKeys(ctx)
		assert.Success(t, err)
		assert.Equal(t, "no keys at first", len(keys), 0)
		keyA, ka, err := chatrelay.NewAgentKey("builder", nil, clk.Now())
		assert.Success(t, err)
		assert.True(t, chatrelay.ValidAgentKey(keyA), "key %q", keyA)
		assert.Success(t, a.AddAgent(ctx, ka))
		announced("an add")
		clk.Advance(time.Second)
		keyB, kb, err := chatrelay.NewAgentKey("reviewer", []string{thA}, clk.Now())
		assert.Success(t, err)
		assert.Success(t, a.AddAgent(ctx, kb))
		assert.Code(t, a.AddAgent(ctx, kb), chatrelay.ClientIDConflict)

		keys, err = agents(t, other).AgentKeys(ctx)
		assert.Success(t, err)
		assert.Equal(t, "newest first", []string{keys[0].ID, keys[1].ID}, []string{kb.ID, ka.ID})
		for _, k := range keys {
			assert.True(t, k.Digest != keyA && k.Digest != keyB, "the digest is kept, never the key")
		}
		assert.Equal(t, "scope", keys[0].Threads, []string{thA})
		got, err := agents(t, other).ResolveAgent(ctx, chatrelay.DigestOf(keyB))
		assert.Success(t, err)
		assert.True(t, got.ID == kb.ID && got.Name == "reviewer" && got.Active() && got.Reaches(thA) && !got.Reaches(thB), "resolved %+v", got)
		_, err = a.ResolveAgent(ctx, chatrelay.DigestOf("cha_unknown"))
		assert.Code(t, err, chatrelay.Unauthorized)

		drain()
		clk.Advance(time.Second)
		r, err := agents(t, other).RevokeAgent(ctx, ka.ID)
		assert.Success(t, err)
		assert.True(t, !r.Active() && r.RevokedAt == clk.Now().UnixMilli(), "revoked %+v", r)
		announced("a revoke by another store")
		clk.Advance(time.Second)
		again, err := a.RevokeAgent(ctx, ka.ID)
		assert.Success(t, err)
		assert.Equal(t, "revoking again changes nothing", again.RevokedAt, r.RevokedAt)
		got, err = a.ResolveAgent(ctx, chatrelay.DigestOf(keyA))
		assert.Success(t, err)
		assert.True(t, !got.Active(), "a revoked key resolves, revoked")
		_, err = a.RevokeAgent(ctx, "a_ffffffff")
		assert.Code(t, err, chatrelay.NotFound)
	})
}

// TestAgentKeyOfANewerBinary: an agent key record with a field this
// binary does not know (a newer chatrelay's, which could narrow what the
// key may do) is refused, never taken without it: on the file store the
// agent keys file does not parse, on Redis that key does not resolve and
// is not listed.
func TestAgentKeyOfANewerBinary(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		b := Open(t, backend, Options{})
		a := agents(t, b)
		key, k, err := chatrelay.NewAgentKey("builder", nil, t0)
		assert.Success(t, err)
		assert.Success(t, a.AddAgent(ctx, k))
		if IsRedis(backend) {
			// The hash is on the one Redis, on shard 0 of a sharded store
			// (the shared records'), and on a cluster under the store's prefix.
			var c redis.Cmdable
			switch backend {
			case RedisShards:
				c = b.Servers[0].Client(t)
			case RedisCluster:
				c = b.Cluster.Client(t)
			default:
				c = b.Client(t)
			}
			hash := b.Prefix + "agents"
			if backend == RedisCluster { // the hash's name, as the store made it
				var mu sync.Mutex
				assert.Success(t, b.Cluster.Client(t).ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					found, err := m.Keys(ctx, b.Prefix+"*agents").Result()
					mu.Lock()
					defer mu.Unlock()
					if len(found) == 1 {
						hash = found[0]
					}
					return err
				}))
			}
			if backend == RedisShards { // shard 0's prefix: that of a thread placed there
				for i := 0; ; i++ {
					if th := fmt.Sprintf("%016x", i); b.Sharded.ShardOf(th) == 0 {
						hash = b.KeyPrefix(th) + "agents"
						break
					}
				}
			}
			js, err := c.HGet(ctx, hash, k.ID).Result()
			assert.Success(t, err)
			assert.Success(t, c.HSet(ctx, hash, k.ID, strings.TrimSuffix(js, "}")+`,"scope":"read"}`).Err())
		} else {
			p := filepath.Join(b.Dir, "chat", "agents.json")
			data, err := os.ReadFile(p)
			assert.Success(t, err)
			assert.Success(t, os.WriteFile(p, []byte(strings.Replace(string(data), `"name"`, `"scope":"read","name"`, 1)), 0o600))
		}
		_, err = agents(t, b.Another(t, Options{})).ResolveAgent(ctx, chatrelay.DigestOf(key))
		assert.True(t, err != nil, "a key with a field this binary does not know resolved")
		if IsRedis(backend) {
			keys, err := a.AgentKeys(ctx)
			assert.Success(t, err)
			assert.Equal(t, "keys listed", len(keys), 0)
		}
	})
}
