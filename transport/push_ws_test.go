package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
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

// TestWSRefusesBadRequests: every refusal is answered before the upgrade,
// as the contract's JSON error with its status, never a 101 followed by a
// close or a library's plain-text answer.
func TestWSRefusesBadRequests(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			c.AllowedOrigins = []string{"https://app.example.com"}
		}})
		for _, tc := range []struct {
			name, path, token string
			hdr               http.Header
			status            int
			code              string
		}{
			{"no token", "/api/chat/ws", "", nil, 401, "unauthorized"},
			{"malformed token", "/api/chat/ws", "ABC", nil, 401, "unauthorized"},
			{"invalid since", "/api/chat/ws?since=-4", tokenN(1), nil, 400, "invalid_since"},
			{"since with a bad escape", "/api/chat/ws?since=%zz", tokenN(1), nil, 400, "invalid_since"},
			{"malformed ticket", "/api/chat/ws?ticket=t1.nope", "", nil, 401, "invalid_ticket"},
			{"foreign origin", "/api/chat/ws", tokenN(1), http.Header{"Origin": {"https://evil.example.net"}}, 403, "origin_not_allowed"},
			{"a pattern is not a glob", "/api/chat/ws", tokenN(1), http.Header{"Origin": {"https://x.app.example.com"}}, 403, "origin_not_allowed"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, eb := e.refusedWS(tc.path, tc.token, tc.hdr)
				assert.Equal(t, "status", resp.StatusCode, tc.status)
				assert.Equal(t, "code", eb.Code, tc.code)
			})
		}
		// The listed origin and the server's own are let in.
		for _, origin := range []string{"https://app.example.com", "HTTPS://APP.EXAMPLE.COM", e.ts.URL} {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			c, _, err := e.dialWS(ctx, "/api/chat/ws", tokenN(2), http.Header{"Origin": {origin}})
			cancel()
			assert.Success(t, err)
			assert.Equal(t, "first frame with Origin "+origin, nextWS(t, c).Type, "ready")
			c.CloseNow()
		}
		// Not a handshake at all: 426 with the JSON body, and Upgrade named.
		for _, tc := range []struct {
			name string
			hdr  http.Header
			want int
			code string
		}{
			{"plain GET", http.Header{}, 426, "upgrade_required"},
			{"version 8", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"8"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}, 426, "upgrade_required"},
			{"bad key", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"short"}}, 400, "invalid_handshake"},
			{"two keys", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZQ=="}}, 400, "invalid_handshake"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.ts.URL+"/api/chat/ws", nil)
				assert.Success(t, err)
				req.Header = tc.hdr
				req.Header.Set("X-Chat-Token", tokenN(1))
				resp, err := http.DefaultClient.Do(req)
				assert.Success(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Success(t, err)
				assert.Equal(t, "status", resp.StatusCode, tc.want)
				assert.Equal(t, "code", decodeError(t, body).Code, tc.code)
				if tc.want == 426 && tc.name == "plain GET" {
					assert.Equal(t, "Upgrade header", resp.Header.Get("Upgrade"), "websocket")
				}
				if tc.name == "version 8" {
					assert.Equal(t, "Sec-WebSocket-Version header", resp.Header.Get("Sec-WebSocket-Version"), "13")
				}
			})
		}
		// A handshake over HTTP/1.0 is refused by the same 426, not by
		// the library's plain text.
		t.Run("HTTP/1.0", func(t *testing.T) {
			conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
			assert.Success(t, err)
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = io.WriteString(conn, "GET /api/chat/ws HTTP/1.0\r\nHost: chat.test\r\nX-Chat-Token: "+tokenN(1)+
				"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
			assert.Success(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			assert.Success(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Success(t, err)
			assert.Equal(t, "status", resp.StatusCode, 426)
			assert.Equal(t, "code", decodeError(t, body).Code, "upgrade_required")
		})
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
			words     string // in the error's words, if set
		}{
			{"empty text", map[string]string{"type": "post", "text": "  \n "}, "invalid_text", false, ""},
			{"text not a string", map[string]any{"type": "post", "text": 5}, "invalid_text", false, ""},
			{"hermes is the host's", map[string]string{"type": "post", "text": "hi", "kind": "hermes"}, "invalid_kind", false, ""},
			{"too long", map[string]string{"type": "post", "text": strings.Repeat("é", 4001)}, "text_too_long", false, ""},
			{"unknown type", map[string]string{"type": "typing"}, "invalid_json", false, ""},
			{"not JSON", "just words", "invalid_json", false, ""},
			{"null", nil, "invalid_json", false, ""},
			{"an array", []any{map[string]string{"type": "post", "text": "hi"}}, "invalid_json", false, ""},
			// An object whose type is not a string was "not a JSON object".
			{"type a number", map[string]any{"type": 5, "text": "hi"}, "invalid_json", false, "type must be a string"},
			{"type an array", map[string]any{"type": []string{"post"}, "text": "hi"}, "invalid_json", false, "type must be a string"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a, _ := wsAnswer(t, c, tc.frame)
				assert.Equal(t, "answer", a, wsFrame{Type: "error", Code: tc.code, Error: a.Error, Retryable: tc.retryable, raw: a.raw})
				assert.True(t, a.Error != "", "no words for a person in %s", a.raw)
				_, object := tc.frame.(map[string]string)
				if _, ok := tc.frame.(map[string]any); ok {
					object = true
				}
				if !object && tc.code == "invalid_json" {
					assert.True(t, strings.Contains(a.Error, "not a JSON object"), "a frame that is no object: %s", a.raw)
				}
				if object {
					assert.True(t, !strings.Contains(a.Error, "not a JSON object"), "an object frame is called no object: %s", a.raw)
				}
				if tc.words != "" {
					assert.True(t, strings.Contains(a.Error, tc.words), "the error does not say %q: %s", tc.words, a.raw)
				}
			})
		}
		// A member name is matched exactly, as the bundle's ws.post reads
		// it: "TYPE" is an unknown member, and this frame's type is typing.
		a, _ = wsAnswer(t, c, json.RawMessage(`{"type":"typing","text":"hi","TYPE":"post"}`))
		assert.True(t, a.Type == "error" && a.Code == "invalid_json", "a typing frame with a TYPE member answered %s", a.raw)
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

		// 64 KiB is read (and refused as a post body past post.body, as
		// over HTTP: TestWSPostBodyLimit); one byte more closes 1009.
		frame := func(size int) []byte {
			head, tail := `{"type":"post","text":"`, `"}`
			return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
		}
		assert.Success(t, c.Write(ctx, websocket.MessageText, frame(64<<10)))
		a := nextWS(t, c)
		assert.Equal(t, "64 KiB frame", a.Code, "body_too_large")
		assert.Success(t, c.Write(ctx, websocket.MessageText, frame(64<<10+1)))
		assert.Equal(t, "close status", wsCloseStatus(t, c, 5*time.Second), websocket.StatusMessageTooBig)
	})
}

// TestWSFrameSentWithTheHandshake: a client may send its first frame in
// the same packet as its handshake; the frame is not lost when the
// connection changes hands (net/http's buffer to the WebSocket's), and it
// is answered only after the stream's ready.
func TestWSFrameSentWithTheHandshake(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	// The client's first frame, masked as a client's must be: FIN+text,
	// MASK+length, the key, the payload XOR the key. It is the test's
	// input, appended to the handshake's one write (one packet on
	// loopback); the WebSocket library does the rest.
	payload := []byte(`{"type":"post","text":"sent with the handshake"}`)
	key := [4]byte{1, 2, 3, 4}
	frame := append([]byte{0x81, 0x80 | byte(len(payload))}, key[:]...)
	for i, b := range payload {
		frame = append(frame, b^key[i%4])
	}
	var d net.Dialer
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &firstWriteAppends{Conn: c, extra: frame}, nil
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.wsURL("/api/chat/ws"), &websocket.DialOptions{
		HTTPClient: client, HTTPHeader: http.Header{"X-Chat-Token": {tok}},
	})
	assert.Success(t, err)
	defer ws.CloseNow()

	var types []string
	for len(types) < 3 { // ready, then posted and the message pushed to this socket, in either order
		types = append(types, nextWS(t, ws).Type)
	}
	slices.Sort(types[1:])
	assert.Equal(t, "frames", types, []string{"ready", "message", "posted"})
	assert.Equal(t, "stored", len(e.poll(tok, 0).Messages), 1)
}

// firstWriteAppends is a connection whose first write (an HTTP client's
// request head) carries extra bytes after it, in the same write.
type firstWriteAppends struct {
	net.Conn
	extra []byte
	done  bool
}

func (c *firstWriteAppends) Write(p []byte) (int, error) {
	if c.done {
		return c.Conn.Write(p)
	}
	c.done = true
	if _, err := c.Conn.Write(append(slices.Clip(p), c.extra...)); err != nil {
		return 0, err
	}
	return len(p), nil
}
