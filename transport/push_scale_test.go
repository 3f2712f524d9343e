package transport_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// TestThousandSubscribers: 1 000 open streams, one SSE and one WebSocket on
// each of 500 threads; every stream gets every message posted to its
// thread, in order, before anything else. On Redis the same test runs with
// the streams' leases and the rate windows in Redis too.
//
// Not parallel: with -race a process may hold at most 8128 goroutines, and
// this test alone uses about 3 000. The subtests run one after the other.
func TestThousandSubscribers(t *testing.T) {
	if testing.Short() {
		t.Skip("1 000 streams; skipped with -short")
	}
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) { thousandSubscribers(t, backend, 500) })
	}
}

func thousandSubscribers(t *testing.T, backend string, threads int) {
	const perThread = 2
	// The streams are read only once every post is in. coder/websocket
	// answers a ping only while the client reads, so a heartbeat due while
	// the posts go on (20 s: a loaded CI machine took longer) would find no
	// pong and rightly end the connection: this test's heartbeat is later.
	e := startPush(t, pushOptions{backend: backend, streamsThread: 20, streamsIP: 2 * threads,
		config: func(c *transport.Config) { c.Heartbeat = time.Hour }})
	sse := make([]*sseStream, threads)
	ws := make([]*websocket.Conn, threads)
	for i := range threads {
		sse[i] = e.mustSSE("/api/chat/stream", tokenN(i), nil)
		assert.Equal(t, "SSE ready", sse[i].nextEvent(t).Event, "ready")
		ws[i] = e.mustWS("/api/chat/ws", tokenN(i))
		assert.Equal(t, "WS ready", nextWS(t, ws[i]).Type, "ready")
	}

	// Post from 8 writers; each thread's messages in order from one writer.
	posted := make([][]int64, threads)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < threads; i += 8 {
				for n := range perThread {
					a, err := e.post(tokenN(i), "thread "+strconv.Itoa(i)+" message "+strconv.Itoa(n))
					if err != nil {
						t.Error(err)
						return
					}
					posted[i] = append(posted[i], a.Epoch)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	for i := range threads {
		for n, epoch := range posted[i] {
			f := sse[i].nextEvent(t)
			assert.Equal(t, "thread "+strconv.Itoa(i)+" SSE message "+strconv.Itoa(n), f.ID, strconv.FormatInt(epoch, 10))
			m := decodeMessage(t, nextWS(t, ws[i]).Message)
			assert.Equal(t, "thread "+strconv.Itoa(i)+" WS message "+strconv.Itoa(n), m.Epoch, epoch)
			assert.Equal(t, "thread "+strconv.Itoa(i)+" WS text", m.Text, "thread "+strconv.Itoa(i)+" message "+strconv.Itoa(n))
		}
	}
}
