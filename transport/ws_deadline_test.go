package transport_test

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// TestWSWriteTimeoutEndsAStuckStream: a WebSocket stream outlives its
// frames' write deadlines (a frame after a pause still goes out, the
// client's own post is answered); a client that stops reading, its socket
// buffers full, has its stream ended once a frame's write outlasts the
// write timeout, and its place under the per-thread limit given back.
func TestWSWriteTimeoutEndsAStuckStream(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		const writeTimeout = 300 * time.Millisecond
		e := startPush(t, pushOptions{backend: backend, streamsThread: 1,
			listener: func(l net.Listener) net.Listener { return smallBuffers{l} },
			config:   func(c *transport.Config) { c.WriteTimeout = writeTimeout },
		})
		tok := tokenN(1)

		ws := e.mustWS("/api/chat/ws", tok)
		assert.Equal(t, "first frame", nextWS(t, ws).Type, "ready")
		m := e.mustPost(tok, "one")
		assert.Equal(t, "first message", decodeMessage(t, nextWS(t, ws).Message).Epoch, m.Epoch)
		<-time.After(2 * writeTimeout) // the first frame's deadline is long past
		m = e.mustPost(tok, "two")
		assert.Equal(t, "message after a pause", decodeMessage(t, nextWS(t, ws).Message).Epoch, m.Epoch)
		writeWS(t, ws, map[string]string{"type": "post", "text": "from the socket"})
		// Its answer and its message, in either order.
		a, b := nextWS(t, ws).Type, nextWS(t, ws).Type
		assert.True(t, a == "posted" && b == "message" || a == "message" && b == "posted", "the socket's post: frames %q, %q", a, b)
		ws.CloseNow()

		stuck := &pushEnv{t: t, ts: e.ts, client: smallReadClient()}
		s := dialWhenFree(t, stuck, tok) // once the closed stream gave its place back
		defer s.CloseNow()
		assert.Equal(t, "stuck stream's first frame", nextWS(t, s).Type, "ready")
		for i := range 40 { // enough to fill the socket buffers, not the hub queue (64)
			e.mustPost(tok, strconv.Itoa(i)+" "+strings.Repeat("x", 3990))
		}
		dialWhenFree(t, e, tok).CloseNow()
	})
}

// dialWhenFree dials the WebSocket of tok's thread until it is not refused
// with 429 (its one place taken), for up to 5 s.
func dialWhenFree(t *testing.T, e *pushEnv, tok string) *websocket.Conn {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, resp, err := e.dialWS(t.Context(), "/api/chat/ws", tok, nil)
		if err == nil {
			return c
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("WebSocket dial: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the thread's stream place was not given back within 5s")
		}
		<-time.After(20 * time.Millisecond)
	}
}
