package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestShutdownAnswersTheWebSocketPostsItStored: clients post over their
// WebSockets without a pause while the server shuts down. Every post the
// store took is answered (a "posted" frame) before the socket closes with
// 1001: a post stored and never answered is sent again by its client, and
// without a client_id (v1) stored twice. Before the fix the post each
// socket had in flight was stored, and its answer dropped by the close.
func TestShutdownAnswersTheWebSocketPostsItStored(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	const sockets = 4
	type result struct {
		answered map[string]bool
		status   websocket.StatusCode
	}
	results := make(chan result, sockets)
	underway := make(chan struct{}, sockets) // a socket's first answer
	for i := range sockets {
		c := e.mustWS("/api/chat/ws", tokenN(i+1))
		assert.Equal(t, "WS ready", nextWS(t, c).Type, "ready")
		go func() { // the writer: posts until the socket ends
			for n := 0; ; n++ {
				b, _ := json.Marshal(map[string]string{"type": "post", "text": fmt.Sprintf("post %d", n)})
				if c.Write(context.Background(), websocket.MessageText, b) != nil {
					return
				}
				time.Sleep(time.Millisecond) // the client's pace
			}
		}()
		go func() { // the reader: the ids answered, until the close
			r := result{answered: map[string]bool{}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for {
				f, err := readWS(ctx, c)
				if err != nil {
					r.status = websocket.CloseStatus(err)
					results <- r
					return
				}
				if f.Type == "posted" {
					if len(r.answered) == 0 {
						underway <- struct{}{}
					}
					r.answered[f.ID] = true
				}
			}
		}()
	}
	for range sockets { // posts under way on every socket
		select {
		case <-underway:
		case <-time.After(10 * time.Second):
			t.Fatal("a socket's posts were not answered within 10 s")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	assert.Success(t, e.srv.Shutdown(ctx))
	answered := map[string]bool{}
	for range sockets {
		r := <-results
		assert.Equal(t, "WebSocket close status", r.status, websocket.StatusGoingAway)
		for id := range r.answered {
			answered[id] = true
		}
	}
	for i := range sockets {
		page, err := e.store.Since(context.Background(), threadN(i+1), 0, 0)
		assert.Success(t, err)
		for _, m := range page.Messages {
			assert.True(t, answered[m.ID], "thread %d: message %s (%q) was stored and never answered", i+1, m.ID, m.Text)
		}
	}
}
