package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
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
// cluster client, which sends a command again after MOVED, ASK or
// TRYAGAIN, must not send this one again: the call fails
// (store_unavailable for the post) and its command ran once.
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

// migration is a slot half-way through its migration to another primary
// (IMPORTING on the target, MIGRATING on the source) with keys k1 moved
// and k2 and n still on the source, as redis-cli --cluster reshard leaves
// it between two MIGRATE batches.
type migration struct {
	c        *redistest.Cluster
	slot     int
	to       string
	k1, k2   string // holding "a" and "b"
	n        string // a counter at 0
	finished sync.Once
}

func startMigration(t *testing.T, c *redistest.Cluster, tag string) *migration {
	m := &migration{c: c, k1: tag + "1", k2: tag + "2", n: tag + "n"}
	cl := c.Client(t)
	ctx := t.Context()
	assert.Success(t, cl.MSet(ctx, m.k1, "a", m.k2, "b", m.n, 0).Err())
	m.slot = int(cl.ClusterKeySlot(ctx, m.k1).Val())
	from := c.PrimaryOfSlot(t, m.slot)
	for _, s := range c.Nodes {
		if s.Addr() != from {
			m.to = s.Addr()
			break
		}
	}
	src, dst := c.Server(t, from).Client(t), c.Server(t, m.to).Client(t)
	assert.Success(t, dst.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", c.ID(t, from)).Err())
	assert.Success(t, src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", c.ID(t, m.to)).Err())
	host, port, _ := strings.Cut(m.to, ":")
	assert.Success(t, src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", m.k1).Err()) // k2 and n stay
	return m
}

// finish migrates the rest of the slot and hands it to the target, once.
func (m *migration) finish(t *testing.T) { m.finished.Do(func() { m.c.MoveSlot(t, m.slot, m.to) }) }

// counter reads n.
func (m *migration) counter(t *testing.T) int {
	got, err := m.c.Client(t).Get(t.Context(), m.n).Int()
	assert.Success(t, err)
	return got
}

// TestClusterPipelineRefusedRunsEachOnce: a pipeline of two commands to a
// slot that is migrating, a multi-key read whose keys are split between
// the two nodes (TRYAGAIN) and an INCR whose key has not moved (it runs).
// go-redis sent the whole share of a node again when its first command
// was refused, and not the refused one at all when it was not the first:
// the INCR must run once either way, and the read must be answered once
// the migration ends (it was refused, 503).
func TestClusterPipelineRefusedRunsEachOnce(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	for _, first := range []string{"read", "incr"} {
		t.Run(first+" first", func(t *testing.T) {
			m := startMigration(t, c, "{r"+first+"}")
			// The migration ends when the store's client sends again what
			// was refused (the read alone).
			opt := Options{Prefix: "p" + first + ":", onRedirect: func(cmds []redis.Cmder) {
				if len(cmds) == 1 && cmds[0].Name() == "mget" {
					m.finish(t)
				}
			}}
			a := openSharded(t, c.URL(), opt)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var read *redis.SliceCmd
			_, err := a.cluster.Pipelined(ctx, func(p redis.Pipeliner) error {
				if first == "read" {
					read = p.MGet(ctx, m.k1, m.k2)
					p.Incr(ctx, m.n)
				} else {
					p.Incr(ctx, m.n)
					read = p.MGet(ctx, m.k1, m.k2)
				}
				return nil
			})
			assert.Success(t, err)
			assert.Equal(t, "the read", strings.Join(anyStrings(read.Val()), ","), "a,b")
			assert.Equal(t, "the counter", m.counter(t), 1)
		})
	}
}

// TestClusterAskFollowed: a key that migrated already (ASK) is read on
// the target, after ASKING, alone and in a pipeline beside a command
// that runs on the source; the read of a key still on the source runs
// there.
func TestClusterAskFollowed(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	m := startMigration(t, c, "{ask}")
	a := openSharded(t, c.URL(), Options{Prefix: "q:"})
	ctx := t.Context()
	got, err := a.cluster.Get(ctx, m.k1).Result()
	assert.Success(t, err)
	assert.Equal(t, "the moved key, alone", got, "a")
	var moved, stayed *redis.StringCmd
	var incr *redis.IntCmd
	_, err = a.cluster.Pipelined(ctx, func(p redis.Pipeliner) error {
		moved = p.Get(ctx, m.k1)
		incr = p.Incr(ctx, m.n)
		stayed = p.Get(ctx, m.k2)
		return nil
	})
	assert.Success(t, err)
	assert.Equal(t, "the moved key", moved.Val(), "a")
	assert.Equal(t, "the key that stayed", stayed.Val(), "b")
	assert.Equal(t, "the INCR's answer", incr.Val(), int64(1))
	assert.Equal(t, "the counter", m.counter(t), 1)
}

// TestClusterMovedFollowed: after a slot moved (its migration ended)
// while the store's client still has the old slot map, a command alone,
// a pipeline and a MULTI/EXEC of the slot meet MOVED and are sent to the
// new primary; each runs once (the INCRs count 3 in all).
func TestClusterMovedFollowed(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	a := openSharded(t, c.URL(), Options{Prefix: "v:"})
	ctx := t.Context()
	for _, step := range []string{"alone", "pipeline", "transaction"} {
		t.Run(step, func(t *testing.T) {
			m := startMigration(t, c, "{mv"+step+"}")
			assert.Success(t, a.cluster.Get(ctx, m.k2).Err()) // the client knows the slot's old primary
			m.finish(t)
			var got string
			var err error
			switch step {
			case "alone":
				err = a.cluster.Incr(ctx, m.n).Err()
				if err == nil {
					got, err = a.cluster.Get(ctx, m.k1).Result()
				}
			case "pipeline":
				var g *redis.StringCmd
				_, err = a.cluster.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, m.n)
					g = p.Get(ctx, m.k1)
					return nil
				})
				got = g.Val()
			case "transaction":
				var g *redis.StringCmd
				_, err = a.cluster.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, m.n)
					g = p.Get(ctx, m.k1)
					return nil
				})
				got = g.Val()
			}
			assert.Success(t, err)
			assert.Equal(t, "the read", got, "a")
			assert.Equal(t, "the counter", m.counter(t), 1)
		})
	}
}

// TestClusterBatchKeepsWhatRan: a batch of the store's scripts (batch.go)
// on a migrating slot: two that run on the source (an INCR each) and one
// whose keys are split between the two nodes (TRYAGAIN), first or between
// them. Each that ran keeps its answer, and runs once, whether the
// refused one is then answered (the migration ends) or stays refused past
// the store timeout: it then fails alone, with Redis's refusal. (The
// reverted clusterredir, with the refused one first and staying refused,
// answered the INCRs that ran "context deadline exceeded": a stored post
// answered 503.)
func TestClusterBatchKeepsWhatRan(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	incr := &luaScript{Script: redis.NewScript("return redis.call('INCR', KEYS[1])")}
	read := &luaScript{Script: redis.NewScript("return redis.call('MGET', KEYS[1], KEYS[2])")}
	for i, tc := range []struct {
		ends    bool
		refused int // the refused script's place in the batch
	}{{true, 0}, {true, 1}, {false, 0}, {false, 1}} {
		name := fmt.Sprintf("migration ends %v, refused %d", tc.ends, tc.refused)
		t.Run(name, func(t *testing.T) {
			m := startMigration(t, c, fmt.Sprintf("{batch%d}", i))
			rounds := 0
			// The store timeout bounds the open, and the batch with the
			// migration's end (MoveSlot, inside the call) in it: generous
			// where it is not the subject. Where the read stays refused,
			// the timeout is what ends its rounds, so it stays below the
			// rounds' own end (their backoffs alone, about 3 s).
			timeout := 5 * time.Second
			if !tc.ends {
				timeout = 2 * time.Second
				assert.True(t, timeout < roundsBackoff(), "the store timeout %v ends no sooner than the rounds' backoffs %v", timeout, roundsBackoff())
			}
			opt := Options{Prefix: "b:", evalOnly: true, Timeout: timeout, onRedirect: func(cmds []redis.Cmder) {
				rounds++
				for _, cmd := range cmds {
					if cmd.Name() != "evalsha" || len(cmd.Args()) < 4 || cmd.Args()[3] != m.k1 {
						t.Errorf("sent again: %v (it was not refused)", cmd.Args())
					}
				}
				if tc.ends {
					m.finish(t)
				}
			}}
			a := openSharded(t, c.URL(), opt)
			ctx := t.Context()
			assert.Success(t, a.cluster.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
				if err := incr.Load(ctx, n).Err(); err != nil {
					return err
				}
				return read.Load(ctx, n).Err()
			}))
			calls := []*scriptCall{{script: incr, keys: []string{m.n}}, {script: incr, keys: []string{m.n}}}
			calls = slices.Insert(calls, tc.refused, &scriptCall{script: read, keys: []string{m.k1, m.k2}})
			for _, call := range calls {
				call.done = make(chan *redis.Cmd, 1)
			}
			a.shards[0].sendBatch(calls)
			var ran []int64
			var refused *redis.Cmd
			for j, call := range calls {
				cmd := <-call.done
				if j == tc.refused {
					refused = cmd
					continue
				}
				got, err := cmd.Int64()
				assert.Success(t, err)
				ran = append(ran, got)
			}
			assert.Equal(t, "the answers of the INCRs that ran", fmt.Sprint(ran), "[1 2]")
			assert.Equal(t, "the counter", m.counter(t), 2)
			if tc.ends {
				got, err := refused.StringSlice()
				assert.Success(t, err)
				assert.Equal(t, "the refused read, answered", strings.Join(got, ","), "a,b")
				return
			}
			err := refused.Err()
			// Redis's refusal, or, when the store timeout ended a send
			// of it, the mark of a command sent again with no answer, or
			// the timeout of the read its answer was due on (it may have
			// run: it is not sent again), seen on a loaded machine.
			var ne net.Error
			assert.True(t, redis.IsTryAgainError(err) || errors.Is(err, errUnanswered) || errors.As(err, &ne) && ne.Timeout(), "the read still refused has %v", err)
			assert.Code(t, a.shards[0].unavailable("read", err), chatrelay.StoreUnavailable)
			assert.True(t, rounds > 1, "the refused read was not sent again until the store timeout")
		})
	}
}

// roundsBackoff is the time a call's redirect rounds wait in all on a
// TRYAGAIN each round (follow sleeps before each): their backoffs from
// redirectMinBackoff doubling up to redirectMaxBackoff, 2.95 s.
func roundsBackoff() time.Duration {
	var all time.Duration
	b := redirectMinBackoff
	for range redirectRounds {
		all += b
		b = min(2*b, redirectMaxBackoff)
	}
	return all
}

func anyStrings(vs []any) []string {
	var out []string
	for _, v := range vs {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}
