package transport_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestWSPostBodyLimit: a post frame holds to a post's body limit
// (post.body, 32 768 bytes), as POST /api/chat/post does: one byte past it
// is answered with a body_too_large error frame, stores nothing, and the
// socket stays open for the next post. Before, a frame of up to 64 KiB (the
// socket's read limit) was posted, a body that HTTP refuses with 413.
func TestWSPostBodyLimit(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	frame := func(n int) []byte { // a post frame of n bytes
		head := `{"type":"post","text":"padded","pad":"`
		return []byte(head + strings.Repeat("x", n-len(head)-2) + `"}`)
	}
	status, _, _ := e.do(http.MethodPost, chatrelay.PathPost, tok, string(frame(chatrelay.MaxBody+1)), nil)
	assert.Equal(t, "an HTTP post one byte over", status, http.StatusRequestEntityTooLarge)

	c := e.mustWS("/api/chat/ws", tok)
	assert.Equal(t, "first", nextWS(t, c).Type, "ready")
	send := func(b []byte) wsFrame {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.Success(t, c.Write(ctx, websocket.MessageText, b))
		for {
			if f := nextWS(t, c); f.Type != "message" {
				return f
			}
		}
	}
	a := send(frame(chatrelay.MaxBody + 1))
	assert.True(t, a.Type == "error" && a.Code == string(chatrelay.BodyTooLarge), "a post frame one byte over the body limit: %s", a.raw)
	a = send(frame(chatrelay.MaxBody))
	assert.True(t, a.Type == "posted", "a post frame at the body limit: %s", a.raw)
	assert.Equal(t, "stored", len(e.poll(tok, 0).Messages), 1)
}
