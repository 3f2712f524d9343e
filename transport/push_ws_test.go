package transport_test

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"encoding/json"
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

// expectWSMessages reads len(want) frames and checks each is
// {"type":"message","message":<the poll's object>}.
func expectWSMessages(t testing.TB, c *websocket.Conn, want []json.RawMessage) {
	t.Helper()
	for i, w := range want {
		f := nextWS(t, c)
		assert.Equal(t, "frame "+strconv.Itoa(i), string(f.raw), `{"type":"message","message":`+string(w)+`}`)
	}
}

func TestWSStream(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		first := e.mustPost(tok, "one")
		e.mustPost(tok, "two")
		e.mustPost(tok, "three")
		page := e.poll(tok, 0)

		c := e.mustWS("/api/chat/ws?since="+strconv.FormatInt(first.Epoch, 10), tok)
		ready := nextWS(t, c)
		assert.Equal(t, "ready", ready, wsFrame{Type: "ready", Thread: threadN(1), Cursor: page.Cursor, Awaiting: true, raw: ready.raw})
		expectWSMessages(t, c, page.Messages[1:])

		e.mustPost(tokenN(2), "elsewhere")
		live := e.mustPost(tok, "four")
		expectWSMessages(t, c, e.poll(tok, live.Epoch-1).Messages)

		// No cursor: the newest 50 like a poll; an empty thread is ready at 0.
		c2 := e.mustWS("/api/chat/ws", tok)
		assert.Equal(t, "ready cursor", nextWS(t, c2).Cursor, live.Epoch)
		expectWSMessages(t, c2, e.poll(tok, 0).Messages)
		c3 := e.mustWS("/api/chat/ws", tokenN(3))
		r3 := nextWS(t, c3)
		assert.Equal(t, "empty thread", r3, wsFrame{Type: "ready", Thread: threadN(3), raw: r3.raw})
	})
}

func TestWSReset(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Retention: chatrelay.Retention{Messages: 5}}})
		tok := tokenN(1)
		var posted []postAnswer
		for i := range 10 {
			posted = append(posted, e.mustPost(tok, "m"+strconv.Itoa(i)))
		}
		c := e.mustWS("/api/chat/ws?since="+strconv.FormatInt(posted[1].Epoch, 10), tok)
		assert.Equal(t, "first", nextWS(t, c).Type, "ready")
		assert.Equal(t, "second", string(nextWS(t, c).raw), `{"type":"reset"}`)
		expectWSMessages(t, c, e.poll(tok, 0).Messages)
	})
}

func TestWSRefusesBadRequests(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		for _, tc := range []struct {
			name, path, token string
			want              websocket.StatusCode
		}{
			{"no token", "/api/chat/ws", "", websocket.StatusPolicyViolation},
			{"malformed token", "/api/chat/ws", "ABC", websocket.StatusPolicyViolation},
			{"invalid since", "/api/chat/ws?since=-4", tokenN(1), websocket.StatusPolicyViolation},
			{"malformed ticket", "/api/chat/ws?ticket=t1.nope", "", websocket.StatusPolicyViolation},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := e.mustWS(tc.path, tc.token)
				assert.Equal(t, "close status", wsCloseStatus(t, c, 5*time.Second), tc.want)
			})
		}
	})
}

// wsAnswer sends a post frame and returns the answer, skipping the pushed
// message frames (which may come before or after it).
func wsAnswer(t testing.TB, c *websocket.Conn, frame any) (answer wsFrame, pushed []wsFrame) {
	t.Helper()
	writeWS(t, c, frame)
	for {
		f := nextWS(t, c)
		if f.Type == "message" {
			pushed = append(pushed, f)
			continue
		}
		return f, pushed
	}
}

func TestWSPost(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, windows: chatrelay.Windows{PerThread: 2, PerIP: 100}})
		tok := tokenN(1)
		c := e.mustWS("/api/chat/ws", tok)
		assert.Equal(t, "first", nextWS(t, c).Type, "ready")

		a, pushed := wsAnswer(t, c, map[string]string{"type": "post", "text": "over the socket", "kind": "agent"})
		assert.Equal(t, "answer type", a.Type, "posted")
		assert.True(t, a.Success && a.ID != "" && a.Epoch > 0 && a.TS != "" && a.Thread == threadN(1), "posted answer %s", a.raw)
		page := e.poll(tok, 0)
		assert.Equal(t, "stored", len(page.Messages), 1)
		m := decodeMessage(t, page.Messages[0])
		assert.Equal(t, "stored message", m, message{ID: a.ID, Epoch: a.Epoch, TS: a.TS, Author: "agent", Text: "over the socket"})
		if len(pushed) == 0 { // the poster's own socket is a subscriber too
			expectWSMessages(t, c, page.Messages)
		} else {
			assert.Equal(t, "pushed", string(pushed[0].raw), `{"type":"message","message":`+string(page.Messages[0])+`}`)
		}

		for _, tc := range []struct {
			name      string
			frame     any
			code      string
			retryable bool
		}{
			{"empty text", map[string]string{"type": "post", "text": "  \n "}, "invalid_text", false},
			{"text not a string", map[string]any{"type": "post", "text": 5}, "invalid_text", false},
			{"hermes is the host's", map[string]string{"type": "post", "text": "hi", "kind": "hermes"}, "invalid_kind", false},
			{"too long", map[string]string{"type": "post", "text": strings.Repeat("é", 4001)}, "text_too_long", false},
			{"unknown type", map[string]string{"type": "typing"}, "invalid_json", false},
			{"not JSON", "just words", "invalid_json", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a, _ := wsAnswer(t, c, tc.frame)
				assert.Equal(t, "answer", a, wsFrame{Type: "error", Code: tc.code, Error: a.Error, Retryable: tc.retryable, raw: a.raw})
				assert.True(t, a.Error != "", "no words for a person in %s", a.raw)
			})
		}
		assert.Equal(t, "stored after refusals", len(e.poll(tok, 0).Messages), 1)

		// The thread's rate window: 2 posts, then rate_limited, retryable.
		a, _ = wsAnswer(t, c, map[string]string{"type": "post", "text": "second"})
		assert.Equal(t, "second post", a.Type, "posted")
		a, _ = wsAnswer(t, c, map[string]string{"type": "post", "text": "third"})
		assert.True(t, a.Type == "error" && a.Code == "rate_limited" && a.Retryable && a.RetryMS > 0, "third post answered %s", a.raw)
		assert.Equal(t, "stored after the rate limit", len(e.poll(tok, 0).Messages), 2)

		// The socket stays usable after errors.
		c.Close(websocket.StatusNormalClosure, "")
	})
}

func TestWSTicketSocketCannotPost(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		c := e.mustWS("/api/chat/ws?ticket="+e.ticket(tok), "")
		assert.Equal(t, "first", nextWS(t, c).Type, "ready")
		a, _ := wsAnswer(t, c, map[string]string{"type": "post", "text": "let me in"})
		assert.Equal(t, "answer", a, wsFrame{Type: "error", Code: "invalid_ticket", Error: a.Error, raw: a.raw})
		assert.Equal(t, "stored", len(e.poll(tok, 0).Messages), 0)
	})
}

func TestWSOrigin(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			c.AllowedOrigins = []string{"https://app.example.com", "https://other.example.org/"}
		}})
		for _, tc := range []struct {
			name, origin string
			ok           bool
		}{
			{"an allowed origin given with a trailing slash", "https://other.example.org", true},
			{"no Origin (not a browser)", "", true},
			{"the server's own origin", e.ts.URL, true},
			{"an allowed origin", "https://app.example.com", true},
			{"a foreign origin", "https://evil.example.net", false},
			{"the allowed host over another scheme", "http://app.example.com", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				hdr := http.Header{}
				if tc.origin != "" {
					hdr.Set("Origin", tc.origin)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c, resp, err := e.dialWS(ctx, "/api/chat/ws", tokenN(1), hdr)
				if !tc.ok {
					assert.True(t, err != nil, "a WebSocket from %s was accepted", tc.origin)
					assert.Equal(t, "status", resp.StatusCode, http.StatusForbidden)
					return
				}
				assert.Success(t, err)
				defer c.CloseNow()
				assert.Equal(t, "first", nextWS(t, c).Type, "ready")
			})
		}
	})
}

func TestWSReadLimit(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		c := e.mustWS("/api/chat/ws", tok)
		assert.Equal(t, "first", nextWS(t, c).Type, "ready")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		// 64 KiB is read (and refused for its text); one byte more closes 1009.
		frame := func(size int) []byte {
			head, tail := `{"type":"post","text":"`, `"}`
			return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
		}
		assert.Success(t, c.Write(ctx, websocket.MessageText, frame(64<<10)))
		a := nextWS(t, c)
		assert.Equal(t, "64 KiB frame", a.Code, "text_too_long")
		assert.Success(t, c.Write(ctx, websocket.MessageText, frame(64<<10+1)))
		assert.Equal(t, "close status", wsCloseStatus(t, c, 5*time.Second), websocket.StatusMessageTooBig)
	})
}
