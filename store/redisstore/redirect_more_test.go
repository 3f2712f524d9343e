package redisstore

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
)

// TestClusterTxWaitsForTheMigration: a MULTI/EXEC whose keys a migration
// splits (one moved, one not) is sent again until the migration ends,
// here at its second round, and answered, whether Redis refused it with
// ASK (two GETs, then EXECABORT) or TRYAGAIN (an MGET of both); it is not
// given up after one round with "no answer" (review11a: a re-sent
// transaction's refusal was hidden behind the mark of a command sent
// again, because go-redis gives a refused transaction's commands its error
// only where they have none).
func TestClusterTxWaitsForTheMigration(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	for _, tc := range []struct {
		name  string
		queue func(ctx context.Context, p redis.Pipeliner, k1, k2 string) func() []string
	}{
		{"ask", func(ctx context.Context, p redis.Pipeliner, k1, k2 string) func() []string {
			g1, g2 := p.Get(ctx, k1), p.Get(ctx, k2)
			return func() []string { return []string{g1.Val(), g2.Val()} }
		}},
		{"tryagain", func(ctx context.Context, p redis.Pipeliner, k1, k2 string) func() []string {
			g := p.MGet(ctx, k1, k2)
			return func() []string { return anyStrings(g.Val()) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMigration(t, c, "{tx"+tc.name+"}")
			var rounds atomic.Int32
			a := openSharded(t, c.URL(), Options{Prefix: tc.name + ":", onRedirect: func([]redis.Cmder) {
				if rounds.Add(1) == 2 {
					m.finish(t)
				}
			}})
			ctx := t.Context()
			var values func() []string
			_, err := a.cluster.TxPipelined(ctx, func(p redis.Pipeliner) error {
				values = tc.queue(ctx, p, m.k1, m.k2)
				return nil
			})
			assert.Success(t, err)
			assert.Equal(t, "the values", values(), []string{"a", "b"})
			assert.True(t, rounds.Load() >= 2, "the transaction was sent again %d times", rounds.Load())
		})
	}
}

// TestClusterShareKeepsAnAnswerRead: two INCRs of one pipeline meet MOVED
// and go again to the new primary, whose connection breaks after the
// first one's answer was read. The first ran and was answered, and keeps
// its answer: a command is never reported failed because another was
// (review11a: a node's share sent as one pipeline had every command of it
// stamped with the broken read's error).
func TestClusterShareKeepsAnAnswerRead(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	marker := []byte("halfcut")
	var armed atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &halfConn{Conn: conn, marker: marker, armed: &armed}, nil
	}
	var rounds atomic.Int32
	a := openSharded(t, c.URL(), Options{Prefix: "y:", dial: dial, onRedirect: func([]redis.Cmder) {
		rounds.Add(1)
		armed.Store(true)
	}})
	ctx := t.Context()
	m := startMigration(t, c, "{halfcut}")
	assert.Success(t, a.cluster.Get(ctx, m.k2).Err()) // the client knows the old primary
	m.finish(t)
	n2 := m.n + "2"
	var i1 *redis.IntCmd
	a.cluster.Pipelined(ctx, func(p redis.Pipeliner) error {
		i1 = p.Incr(ctx, m.n)
		p.Incr(ctx, n2)
		return nil
	})
	assert.True(t, rounds.Load() > 0, "the INCRs were not redirected")
	assert.Equal(t, "the first counter", m.counter(t), 1)
	assert.Success(t, i1.Err())
	assert.Equal(t, "the first INCR's answer", i1.Val(), int64(1))
}

// halfConn, once armed, lets through the first answer line read after a
// write that holds marker, then breaks the connection: the first command
// of that write was answered, the second ran and its answer was lost.
type halfConn struct {
	net.Conn
	marker  []byte
	armed   *atomic.Bool
	mu      sync.Mutex
	cutting bool
}

func (c *halfConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.marker) && c.armed.CompareAndSwap(true, false) {
		c.mu.Lock()
		c.cutting = true
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *halfConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	cutting := c.cutting
	c.cutting = false
	c.mu.Unlock()
	if !cutting {
		return c.Conn.Read(p)
	}
	// Wait until the answers of both commands are in, pass the first
	// line, then break.
	var buf []byte
	tmp := make([]byte, 64)
	for bytes.Count(buf, []byte("\r\n")) < 2 {
		n, err := c.Conn.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			break
		}
	}
	c.Conn.Close()
	i := bytes.Index(buf, []byte("\r\n"))
	if i < 0 {
		return 0, net.ErrClosed
	}
	return copy(p, buf[:i+2]), nil
}
