package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// testClock is a settable clock for Config.Now.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *testClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestTicket(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		clock := &testClock{t: time.Now()}
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			c.Now = clock.Now
			c.TicketTTL = time.Minute
		}})
		tok := tokenN(1)
		e.mustPost(tok, "hello")

		status, _, body := e.do(http.MethodPost, "/api/chat/ticket", tok, "", nil)
		assert.Equal(t, "status", status, http.StatusCreated)
		var raw map[string]json.RawMessage
		assert.Success(t, json.Unmarshal(body, &raw))
		assert.Equal(t, "fields", len(raw), 4)
		var a struct {
			Success   bool   `json:"success"`
			Ticket    string `json:"ticket"`
			Thread    string `json:"thread"`
			ExpiresAt int64  `json:"expires_at"`
		}
		assert.Success(t, json.Unmarshal(body, &a))
		assert.True(t, a.Success && a.Ticket != "", "answer %s", body)
		assert.Equal(t, "thread", a.Thread, threadN(1))
		assert.Equal(t, "expires_at", a.ExpiresAt, clock.Now().Add(time.Minute).UnixMilli())
		assert.True(t, !strings.Contains(a.Ticket, tok) && !strings.Contains(a.Ticket, tok[:32]) && !strings.Contains(a.Ticket, tok[32:]),
			"the ticket %q carries the token", a.Ticket)
		assert.Equal(t, "ticket is URL-safe", url.QueryEscape(a.Ticket), a.Ticket)

		// Without a valid token: no ticket.
		status, _, body = e.do(http.MethodPost, "/api/chat/ticket", "", "", nil)
		assert.Equal(t, "no token", status, http.StatusUnauthorized)
		assert.Equal(t, "no token code", decodeError(t, body).Code, "unauthorized")
		status, _, body = e.do(http.MethodPost, "/api/chat/ticket?ticket="+a.Ticket, "", "", nil)
		assert.Equal(t, "a ticket for a ticket", status, http.StatusUnauthorized)
		assert.Equal(t, "a ticket for a ticket code", decodeError(t, body).Code, "invalid_ticket")

		// A valid ticket opens both streams of its own thread, read-only.
		s := e.mustSSE("/api/chat/stream?ticket="+a.Ticket, "", nil)
		ready := s.nextEvent(t)
		assert.Equal(t, "SSE ready", decodeReady(t, ready.Data).Thread, threadN(1))
		expectMessages(t, s, e.poll(tok, 0).Messages)
		c := e.mustWS("/api/chat/ws?ticket="+url.QueryEscape(a.Ticket), "")
		assert.Equal(t, "WS ready", nextWS(t, c).Thread, threadN(1))

		// A ticket never opens post or poll.
		for _, p := range []struct{ method, path, body string }{
			{http.MethodPost, "/api/chat/post", `{"text":"hi"}`},
			{http.MethodPost, "/api/chat/post.php", `{"text":"hi"}`},
			{http.MethodGet, "/api/chat/poll", ""},
			{http.MethodGet, "/api/chat/poll.php", ""},
		} {
			status, _, body := e.do(p.method, p.path+"?ticket="+a.Ticket, "", p.body, nil)
			assert.Equal(t, p.method+" "+p.path+" status", status, http.StatusUnauthorized)
			assert.Equal(t, p.method+" "+p.path+" code", decodeError(t, body).Code, "invalid_ticket")
		}
		assert.Equal(t, "messages after the ticket posts", len(e.poll(tok, 0).Messages), 1)

		// Refused tickets: 401 invalid_ticket on SSE, close 1008 on the WebSocket.
		parts := strings.Split(a.Ticket, ".")
		assert.Equal(t, "ticket parts", len(parts), 4)
		flip := func(s string) string {
			b := []byte(s)
			if b[len(b)-1] == 'A' {
				b[len(b)-1] = 'B'
			} else {
				b[len(b)-1] = 'A'
			}
			return string(b)
		}
		later, _ := strconv.ParseInt(parts[2], 10, 64)
		other := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) { c.TicketKey = []byte(strings.Repeat("k", 32)) }})
		refused := []struct{ name, ticket string }{
			{"tampered signature", parts[0] + "." + parts[1] + "." + parts[2] + "." + flip(parts[3])},
			{"tampered expiry", parts[0] + "." + parts[1] + "." + strconv.FormatInt(later+3600_000, 10) + "." + parts[3]},
			{"other thread's", parts[0] + "." + threadN(2) + "." + parts[2] + "." + parts[3]},
			{"signed by another key", other.ticket(tok)},
			{"malformed", "not-a-ticket"},
			{"empty", ""},
			{"the token itself", tok},
			{"too long", a.Ticket + strings.Repeat("A", 200)},
		}
		checkRefused := func(t *testing.T, ticket string) {
			sse, resp, body, err := e.openSSE(context.Background(), "/api/chat/stream?ticket="+url.QueryEscape(ticket), "", nil)
			assert.Success(t, err)
			if sse != nil {
				sse.Close()
				t.Fatal("SSE stream opened")
			}
			assert.Equal(t, "SSE status", resp.StatusCode, http.StatusUnauthorized)
			eb := decodeError(t, body)
			assert.Equal(t, "SSE code", eb.Code, "invalid_ticket")
			assert.True(t, !eb.Retryable, "invalid_ticket is retryable")
			wresp, web := e.refusedWS("/api/chat/ws?ticket="+url.QueryEscape(ticket), "", nil)
			assert.Equal(t, "WS status", wresp.StatusCode, http.StatusUnauthorized)
			assert.Equal(t, "WS code", web.Code, "invalid_ticket")
		}
		for _, tc := range refused {
			t.Run(tc.name, func(t *testing.T) { checkRefused(t, tc.ticket) })
		}
		t.Run("expired", func(t *testing.T) {
			clock.Advance(time.Minute)
			checkRefused(t, a.Ticket)
		})
	})
}

// TestStreamLimits: on Redis the limits are the shared ones (leases in
// Redis), as every node of a store counts them.
func TestStreamLimits(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, streamsThread: 2, streamsIP: 3})
		a, b := tokenN(1), tokenN(2)
		refusedSSE := func(token string) {
			t.Helper()
			s, resp, body, err := e.openSSE(context.Background(), "/api/chat/stream", token, nil)
			assert.Success(t, err)
			if s != nil {
				s.Close()
				t.Fatal("stream opened past the limit")
			}
			assert.Equal(t, "status", resp.StatusCode, http.StatusTooManyRequests)
			eb := decodeError(t, body)
			assert.True(t, eb.Code == "too_many_streams" && eb.Retryable, "answer %s", body)
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			assert.True(t, err == nil && secs > 0, "Retry-After %q", resp.Header.Get("Retry-After"))
		}
		refusedWS := func(token string) {
			t.Helper()
			resp, eb := e.refusedWS("/api/chat/ws", token, nil)
			assert.Equal(t, "WS status", resp.StatusCode, http.StatusTooManyRequests)
			assert.True(t, eb.Code == "too_many_streams" && eb.Retryable, "WS answer %+v", eb)
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			assert.True(t, err == nil && secs > 0, "WS Retry-After %q", resp.Header.Get("Retry-After"))
		}

		// Per thread: 2.
		s1 := e.mustSSE("/api/chat/stream", a, nil)
		s1.nextEvent(t)
		w1 := e.mustWS("/api/chat/ws", a)
		nextWS(t, w1)
		refusedSSE(a)
		refusedWS(a)

		// Per IP: 3, whatever the thread.
		s2 := e.mustSSE("/api/chat/stream", b, nil)
		s2.nextEvent(t)
		refusedSSE(b)
		refusedWS(b)

		// A stream that ends gives its place back.
		w1.Close(websocket.StatusNormalClosure, "")
		deadline := time.Now().Add(5 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, resp, _, err := e.openSSE(ctx, "/api/chat/stream", a, nil)
			assert.Success(t, err)
			if s != nil {
				f := within(t, 5*time.Second, "ready", s.Close, s.NextEvent)
				assert.Equal(t, "reopened", f.Event, "ready")
				s.Close()
				cancel()
				break
			}
			cancel()
			assert.Equal(t, "status while the old stream ends", resp.StatusCode, http.StatusTooManyRequests)
			if time.Now().After(deadline) {
				t.Fatal("a closed WebSocket still counts against the limit after 5s")
			}
			<-time.After(10 * time.Millisecond) // the server notices the close
		}
	})
}

func TestCORS(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			c.AllowedOrigins = []string{"https://app.example.com"}
		}})
		preflight := func(path, origin string) http.Header {
			t.Helper()
			_, h, _ := e.do(http.MethodOptions, path, "", "", map[string]string{
				"Origin":                         origin,
				"Access-Control-Request-Method":  "POST",
				"Access-Control-Request-Headers": "x-chat-token, content-type",
			})
			return h
		}
		for _, path := range []string{"/api/chat/post", "/api/chat/poll", "/api/chat/ticket", "/api/chat/stream", "/api/chat/post.php"} {
			h := preflight(path, "https://app.example.com")
			assert.Equal(t, path+" Allow-Origin", h.Get("Access-Control-Allow-Origin"), "https://app.example.com")
			allowed := strings.ToLower(h.Get("Access-Control-Allow-Headers"))
			assert.True(t, strings.Contains(allowed, "x-chat-token") && strings.Contains(allowed, "content-type"),
				"%s Allow-Headers %q", path, allowed)
			assert.True(t, strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST"), "%s Allow-Methods %q", path, h.Get("Access-Control-Allow-Methods"))

			h = preflight(path, "https://evil.example.net")
			for _, k := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Headers", "Access-Control-Allow-Methods"} {
				assert.Equal(t, path+" unlisted origin "+k, h.Get(k), "")
			}
		}
		// The actual request from the allowed origin carries the header too.
		_, h, _ := e.do(http.MethodGet, "/api/chat/poll", tokenN(1), "", map[string]string{"Origin": "https://app.example.com"})
		assert.Equal(t, "poll Allow-Origin", h.Get("Access-Control-Allow-Origin"), "https://app.example.com")
	})
}
