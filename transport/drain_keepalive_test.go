package transport_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestDrainClosesKeptConnections: while the server drains (--drain-delay:
// /readyz at 503, the listener still open), each answer says
// Connection: close and its connection ends, so that a client or a proxy
// that keeps connections (nginx's upstream keepalive) sends its next
// request on a new one, not on a kept one that the listener's close cuts
// while the request is on its way. The probe behind nginx found a post
// sent so answered 502 by nginx, not knowing whether it ran. A WebSocket
// still opens meanwhile.
func TestDrainClosesKeptConnections(t *testing.T) {
	t.Parallel()
	e := opsStart(t, true, nil)
	tok := strings.Repeat("7", 64)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	// send does a request and says whether it went on a kept connection
	// and whether the answer closes it.
	send := func(method, path, body string) (status int, reused, closes bool) {
		t.Helper()
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
		})
		req, err := http.NewRequestWithContext(ctx, method, e.ts.URL+path, strings.NewReader(body))
		assert.Success(t, err)
		req.Header.Set("X-Chat-Token", tok)
		resp, err := client.Do(req)
		assert.Success(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, reused, resp.Close
	}
	status, _, closes := send("POST", "/api/chat/post", `{"text":"before the drain"}`)
	assert.Equal(t, "post before the drain", status, http.StatusCreated)
	assert.True(t, !closes, "an answer before the drain closes its connection")
	status, reused, closes := send("GET", "/api/chat/poll", "")
	assert.Equal(t, "poll before the drain", status, http.StatusOK)
	assert.True(t, reused, "the client did not keep its connection before the drain")
	assert.True(t, !closes, "an answer before the drain closes its connection")

	e.srv.Drain()
	status, reused, closes = send("POST", "/api/chat/post", `{"text":"while draining"}`)
	assert.Equal(t, "post while draining", status, http.StatusCreated)
	assert.True(t, reused, "the post while draining did not go on the kept connection")
	assert.True(t, closes, "an answer while draining leaves its connection open for the next request, which the listener's close may cut")
	for _, path := range []string{"/api/chat/poll", "/readyz"} {
		_, reused, closes = send("GET", path, "")
		assert.True(t, !reused, "a request after an answer while draining went on the connection that answer closed")
		assert.True(t, closes, "an answer while draining leaves its connection open")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/api/chat/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Chat-Token": {tok}}})
	assert.Success(t, err)
	defer c.CloseNow()
	_, frame, err := c.Read(ctx)
	assert.Success(t, err)
	assert.True(t, strings.Contains(string(frame), `"type":"ready"`), "a WebSocket while draining got %s first, not ready", frame)
}
