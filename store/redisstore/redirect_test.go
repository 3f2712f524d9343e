package redisstore

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// cutConn is a connection that breaks once, right after it sent a write
// that holds marker (while cut is set): the command reached Redis, which
// runs it, and its answer is lost.
type cutConn struct {
	net.Conn
	marker []byte
	cut    *atomic.Bool
}

func (c *cutConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && bytes.Contains(p, c.marker) && c.cut.CompareAndSwap(true, false) {
		c.Conn.Close()
	}
	return n, err
}

// TestClusterLostAnswerNotSentAgain: the connection of a command breaks
// after the command was sent, before its answer came back, so that it ran
// (a post, a counter's INCR alone, in a pipeline, in a MULTI/EXEC). The
// cluster client, which now sends a command again after MOVED, ASK or
// TRYAGAIN, must not send this one again: the call fails
// (store_unavailable for the post) and its command ran once. (With
// go-redis's redirections on and no onceHook, the post was stored twice
// and the INCRs counted 2 or more.)
func TestClusterLostAnswerNotSentAgain(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	marker := []byte("lost-answer")
	var cut atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn, marker: marker, cut: &cut}, nil
	}
	a := openSharded(t, c.URL(), Options{Prefix: "o:", dial: dial})
	ctx := t.Context()

	t.Run("post", func(t *testing.T) {
		const th = "00000000000c0001"
		must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "before"}))
		cut.Store(true)
		_, err := a.Append(ctx, th, store.NewMessage{Text: "lost-answer post"}) // no client_id: a second run would store it again
		assert.True(t, !cut.Load(), "the connection was not cut")
		assert.Code(t, err, chatrelay.StoreUnavailable)
		n := 0
		for _, e := range must[store.Page](t)(a.Since(ctx, th, 0, 0)).Messages {
			if e.Text == "lost-answer post" {
				n++
			}
		}
		assert.Equal(t, "times the post is stored", n, 1)
	})

	counter := func(t *testing.T, name string, send func(ctx context.Context, key string) error) {
		t.Run(name, func(t *testing.T) {
			key := "o:{s3}:lost-answer:" + name // the marker is in the key
			cut.Store(true)
			err := send(ctx, key)
			assert.True(t, !cut.Load(), "the connection was not cut")
			assert.True(t, err != nil, "the call whose answer was lost succeeded")
			got, gerr := c.Client(t).Get(ctx, key).Int()
			assert.Success(t, gerr)
			assert.Equal(t, "the counter", got, 1)
		})
	}
	counter(t, "alone", func(ctx context.Context, key string) error { return a.cluster.Incr(ctx, key).Err() })
	counter(t, "pipeline", func(ctx context.Context, key string) error {
		_, err := a.cluster.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Get(ctx, "o:{s3}:other")
			p.Incr(ctx, key)
			return nil
		})
		return err
	})
	counter(t, "transaction", func(ctx context.Context, key string) error {
		_, err := a.cluster.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, key)
			return nil
		})
		return err
	})
}

// TestClusterPipelineRefusedRunsEachOnce: a pipeline of two commands to a
// slot that is migrating, a multi-key read whose keys are split between
// the two nodes (TRYAGAIN) and an INCR whose key has not moved (it runs).
// go-redis sends the whole share of a node again when its first command
// was refused, and not the refused one at all when it is not the first:
// the INCR must run once either way, and the read must be answered once
// the migration ends (it was refused, 503).
func TestClusterPipelineRefusedRunsEachOnce(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	for _, first := range []string{"read", "incr"} {
		t.Run(first+" first", func(t *testing.T) {
			tag := "{r" + first + "}"
			k1, k2, n := tag+"1", tag+"2", tag+"n"
			cl := c.Client(t)
			ctx := t.Context()
			assert.Success(t, cl.MSet(ctx, k1, "a", k2, "b", n, 0).Err())
			slot := int(cl.ClusterKeySlot(ctx, k1).Val())
			from := c.PrimaryOfSlot(t, slot)
			var to string
			for _, s := range c.Nodes {
				if s.Addr() != from {
					to = s.Addr()
					break
				}
			}
			src, dst := c.Server(t, from).Client(t), c.Server(t, to).Client(t)
			assert.Success(t, dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ID(t, from)).Err())
			assert.Success(t, src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ID(t, to)).Err())
			host, port, _ := strings.Cut(to, ":")
			assert.Success(t, src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", k1).Err()) // k2 and n stay

			// The migration ends when the store's client sends again what
			// was refused (its second round through the gate, the read alone).
			var finish sync.Once
			opt := Options{Prefix: "p" + first + ":", onGate: func(cmds []redis.Cmder) {
				if len(cmds) == 1 && cmds[0].Name() == "mget" {
					finish.Do(func() { c.MoveSlot(t, slot, to) })
				}
			}}
			a := openSharded(t, c.URL(), opt)
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			var read *redis.SliceCmd
			_, err := a.cluster.Pipelined(ctx, func(p redis.Pipeliner) error {
				if first == "read" {
					read = p.MGet(ctx, k1, k2)
					p.Incr(ctx, n)
				} else {
					p.Incr(ctx, n)
					read = p.MGet(ctx, k1, k2)
				}
				return nil
			})
			assert.Success(t, err)
			assert.Equal(t, "the read", strings.Join(anyStrings(read.Val()), ","), "a,b")
			got, gerr := cl.Get(ctx, n).Int()
			assert.Success(t, gerr)
			assert.Equal(t, "the counter", got, 1)
		})
	}
}

func anyStrings(vs []any) []string {
	var out []string
	for _, v := range vs {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}
