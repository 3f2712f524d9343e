//go:build unix

package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// smallBuffers makes the kernel buffer little of what a reader does not
// read, so that a client that stops reading fills its queue quickly.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// smallReadClient is an HTTP client whose sockets have a small receive buffer.
func smallReadClient() *http.Client {
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
		return errors.Join(err, serr)
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// TestSlowSubscriberIsDropped: on one thread, an SSE and a WebSocket client
// that stop reading are dropped (hub queue full, connection ended: SSE
// closed, WebSocket 1013) while a fast SSE and a fast WebSocket client
// receive every message as it is posted. Each slow client then resumes from
// the last message it got and misses nothing.
func TestSlowSubscriberIsDropped(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		drops := make(chan error, 16)
		h := hub.New[*transport.Event](8)
		h.OnDrop(func(err error) {
			select {
			case drops <- err:
			default:
			}
		})
		e := startPush(t, pushOptions{backend: backend,
			config:   func(c *transport.Config) { c.Hub = h },
			listener: func(l net.Listener) net.Listener { return smallBuffers{l} },
		})
		tok := tokenN(1)
		first := e.mustPost(tok, "start")
		since := "?since=" + strconv.FormatInt(first.Epoch, 10)

		// The slow ones read their ready frame, then nothing.
		slow := &pushEnv{t: t, ts: e.ts, client: smallReadClient()}
		slowSSE := slow.mustSSE("/api/chat/stream"+since, tok, nil)
		assert.Equal(t, "slow SSE ready", slowSSE.nextEvent(t).Event, "ready")
		slowWS := slow.mustWS("/api/chat/ws"+since, tok)
		assert.Equal(t, "slow WS ready", nextWS(t, slowWS).Type, "ready")

		// The fast ones hand over every epoch they get.
		fastSSE := e.mustSSE("/api/chat/stream"+since, tok, nil)
		assert.Equal(t, "fast SSE ready", fastSSE.nextEvent(t).Event, "ready")
		fastWS := e.mustWS("/api/chat/ws"+since, tok)
		assert.Equal(t, "fast WS ready", nextWS(t, fastWS).Type, "ready")
		sseGot, wsGot := make(chan int64, 1024), make(chan int64, 1024)
		go func() {
			defer close(sseGot)
			for {
				f, err := fastSSE.NextEvent()
				if err != nil {
					return
				}
				n, _ := strconv.ParseInt(f.ID, 10, 64)
				sseGot <- n
			}
		}()
		go func() {
			defer close(wsGot)
			for {
				f, err := readWS(context.Background(), fastWS)
				if err != nil {
					return
				}
				var m message
				if json.Unmarshal(f.Message, &m) != nil {
					return
				}
				wsGot <- m.Epoch
			}
		}()
		var worst time.Duration
		await := func(name string, got <-chan int64, epoch int64, posted time.Time) {
			t.Helper()
			timer := time.NewTimer(5 * time.Second)
			defer timer.Stop()
			select {
			case n, ok := <-got:
				assert.True(t, ok, "the fast %s stream ended", name)
				assert.Equal(t, "fast "+name+" epoch", n, epoch)
				worst = max(worst, time.Since(posted))
			case <-timer.C:
				t.Fatalf("the fast %s client did not get message %d within 5s", name, epoch)
			}
		}
		post := func(i int) int64 {
			at := time.Now()
			m := e.mustPost(tok, strconv.Itoa(i)+" "+strings.Repeat("x", 3990))
			await("SSE", sseGot, m.Epoch, at)
			await("WS", wsGot, m.Epoch, at)
			return m.Epoch
		}

		var reasons []error
		posts := 0
		for len(reasons) < 2 {
			if posts++; posts > 400 {
				t.Fatalf("400 messages of 4 KB did not fill the queues of the clients that do not read (dropped: %v)", reasons)
			}
			post(posts)
			for len(drops) > 0 {
				reasons = append(reasons, <-drops)
			}
		}
		// The slow WebSocket client reads from now on, beside the rest:
		// the server's close frame (1013) waits behind the messages in
		// the small socket buffers, and the close handshake gives its
		// write 5 s before it cuts the connection without one. Read only
		// after the SSE client's checks, it came too late on a loaded
		// machine (close status -1).
		type wsEnd struct {
			frames []wsFrame
			err    error
		}
		slowWSEnd := make(chan wsEnd, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			var end wsEnd
			for end.err == nil {
				var f wsFrame
				if f, end.err = readWS(ctx, slowWS); end.err == nil {
					end.frames = append(end.frames, f)
				} else if ctx.Err() != nil {
					end.err = fmt.Errorf("the slow WebSocket was not closed within 15s: %w", end.err)
				}
			}
			slowWSEnd <- end
		}()
		var last int64
		for i := range 5 {
			last = post(posts + 1 + i)
		}
		t.Logf("slow clients dropped after %d messages; fast clients got each of %d within %v", posts, posts+5, worst)
		for _, r := range reasons {
			assert.ErrorIs(t, r, hub.ErrSlow)
		}
		assert.Equal(t, "subscribers left", h.Subscribers(), 2)

		all := e.poll(tok, first.Epoch).Messages
		assert.Equal(t, "stored", len(all), posts+5)
		assert.Equal(t, "newest", decodeMessage(t, all[len(all)-1]).Epoch, last)
		// prefix checks that got is the start of all, in order, once each, and
		// not all of it (the client was dropped).
		prefix := func(name string, got []int64) {
			t.Helper()
			assert.True(t, len(got) < len(all), "the slow %s client got every message: it was not cut off", name)
			for i, n := range got {
				assert.Equal(t, "slow "+name+" message "+strconv.Itoa(i), n, decodeMessage(t, all[i]).Epoch)
			}
		}

		// The slow SSE client reads what was sent before the drop; then its
		// stream ends, and resuming from its Last-Event-ID gives the rest.
		got := within(t, 15*time.Second, "the slow SSE stream to end", slowSSE.Close, func() ([]int64, error) {
			var got []int64
			for {
				f, err := slowSSE.NextEvent()
				if err != nil {
					return got, nil // ended, as it should
				}
				n, _ := strconv.ParseInt(f.ID, 10, 64)
				got = append(got, n)
			}
		})
		prefix("SSE", got)
		resume := first.Epoch
		if len(got) > 0 {
			resume = got[len(got)-1]
		}
		again := e.mustSSE("/api/chat/stream", tok, map[string]string{"Last-Event-ID": strconv.FormatInt(resume, 10)})
		assert.Equal(t, "resumed SSE ready", again.nextEvent(t).Event, "ready")
		expectMessages(t, again, all[len(got):])

		// The slow WebSocket client likewise, and its close status says "try
		// again later".
		end := assert.Receive(t, slowWSEnd, "the slow WebSocket's end")
		assert.True(t, websocket.CloseStatus(end.err) == websocket.StatusTryAgainLater, "the slow WebSocket ended with %v, want close status 1013", end.err)
		var wgot []int64
		for _, f := range end.frames {
			wgot = append(wgot, decodeMessage(t, f.Message).Epoch)
		}
		prefix("WS", wgot)
		resume = first.Epoch
		if len(wgot) > 0 {
			resume = wgot[len(wgot)-1]
		}
		wagain := e.mustWS("/api/chat/ws?since="+strconv.FormatInt(resume, 10), tok)
		assert.Equal(t, "resumed WS ready", nextWS(t, wagain).Type, "ready")
		expectWSMessages(t, wagain, all[len(wgot):])
	})
}

// TestShutdownWithStuckClients: clients that stopped reading, an SSE and a
// WebSocket client whose socket buffers are full (their handlers blocked in
// a write) and a WebSocket client that never answers the close handshake,
// must not hold Shutdown to its deadline; healthy clients still get a clean
// end and 1001, and the stuck clients' streams end too.
func TestShutdownWithStuckClients(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, listener: func(l net.Listener) net.Listener { return smallBuffers{l} }})
		tok := tokenN(1)
		stuck := &pushEnv{t: t, ts: e.ts, client: smallReadClient()}
		stuckSSE := stuck.mustSSE("/api/chat/stream", tok, nil)
		assert.Equal(t, "stuck SSE ready", stuckSSE.nextEvent(t).Event, "ready")
		stuckWS := stuck.mustWS("/api/chat/ws", tok)
		assert.Equal(t, "stuck WS ready", nextWS(t, stuckWS).Type, "ready")
		silentWS := e.mustWS("/api/chat/ws", tokenN(2))
		assert.Equal(t, "silent WS ready", nextWS(t, silentWS).Type, "ready")
		healthySSE := e.mustSSE("/api/chat/stream", tokenN(3), nil)
		assert.Equal(t, "healthy SSE ready", healthySSE.nextEvent(t).Event, "ready")
		healthyWS := e.mustWS("/api/chat/ws", tokenN(3))
		assert.Equal(t, "healthy WS ready", nextWS(t, healthyWS).Type, "ready")
		// Enough 4 KB messages to fill the stuck clients' buffers, not their
		// hub queues (64): their handlers are left blocked in a write.
		for i := range 40 {
			e.mustPost(tok, strconv.Itoa(i)+" "+strings.Repeat("x", 3990))
		}
		healthyEnd := make(chan error, 1)
		go func() {
			for {
				if _, err := healthySSE.Next(); err != nil {
					healthyEnd <- err
					return
				}
			}
		}()
		healthyWSEnd := make(chan websocket.StatusCode, 1)
		go func() {
			for {
				if _, _, err := healthyWS.Read(context.Background()); err != nil {
					healthyWSEnd <- websocket.CloseStatus(err)
					return
				}
			}
		}()

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		assert.Success(t, e.srv.Shutdown(ctx))
		t.Logf("Shutdown with stuck clients took %v", time.Since(start))
		assert.ErrorIs(t, <-healthyEnd, io.EOF)
		assert.Equal(t, "healthy WS close status", <-healthyWSEnd, websocket.StatusGoingAway)
		// The stuck clients, reading at last, find their streams ended.
		within(t, 5*time.Second, "the stuck SSE stream to end", stuckSSE.Close, func() (int, error) {
			for {
				if _, err := stuckSSE.Next(); err != nil {
					return 0, nil
				}
			}
		})
		wsCloseStatus(t, stuckWS, 5*time.Second)
		wsCloseStatus(t, silentWS, 5*time.Second)
		// New streams are refused while the server shuts down.
		s, resp, body, err := e.openSSE(ctx, "/api/chat/stream", tok, nil)
		assert.Success(t, err)
		assert.True(t, s == nil && resp.StatusCode == http.StatusServiceUnavailable, "a stream during shutdown: %d %s", resp.StatusCode, body)
		wresp, web := e.refusedWS("/api/chat/ws", tok, nil)
		assert.True(t, wresp.StatusCode == http.StatusServiceUnavailable && web.Code == "store_unavailable" && web.Retryable,
			"a WebSocket during shutdown: %d %+v", wresp.StatusCode, web)
	})
}
