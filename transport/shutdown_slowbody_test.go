package transport_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestShutdownCutsABodyStillArriving: a client that sends a post's body
// too slowly (or stopped sending it) when the server is told to stop.
// Its read is cut at the end of the grace, as an upload's is: the post,
// which stored nothing, is answered 503 store_unavailable (retryable), and
// http.Server.Shutdown ends within its deadline. Before the fix the
// handler read on until the 30 s ReadTimeout, so the listener's Shutdown
// ran out its 5 s, the client got no answer, and "chatrelay serve" exited
// 1 with "context deadline exceeded" on a plain SIGTERM.
func TestShutdownCutsABodyStillArriving(t *testing.T) {
	t.Parallel()
	for _, path := range []string{chatrelay.PathPost, chatrelay.PathTicket} {
		t.Run(strings.TrimPrefix(path, "/api/chat/"), func(t *testing.T) {
			t.Parallel()
			// The slow request is in its handler: Go's server drops a
			// request it has read once its Shutdown has begun (so a
			// connection merely active, its header being read, is not
			// enough to wait for).
			inHandler := make(chan struct{}, 1)
			e := startPush(t, pushOptions{http: func(hs *http.Server) {
				h := hs.Handler
				hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Slow") != "" {
						inHandler <- struct{}{}
					}
					h.ServeHTTP(w, r)
				})
			}})
			token := tokenN(1)
			e.mustPost(token, "hello")

			conn, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
			assert.Success(t, err)
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\nX-Chat-Token: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":", path, token)
			assert.Success(t, err)
			select {
			case <-inHandler:
			case <-time.After(5 * time.Second):
				t.Fatal("the slow post was not in its handler within 5 s")
			}

			hs := e.ts.Config
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.RegisterOnShutdown(func() { e.srv.Shutdown(ctx) })
			stopped := make(chan error, 1)
			go func() { stopped <- hs.Shutdown(ctx) }()

			assert.Success(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			assert.Success(t, err)
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, "status of the post cut by the shutdown", resp.StatusCode, http.StatusServiceUnavailable)
			a := decodeError(t, body)
			assert.Equal(t, "code", a.Code, string(chatrelay.StoreUnavailable))
			assert.True(t, a.Retryable, "the cut post's answer is retryable: %s", body)
			assert.Success(t, <-stopped)
			p, err := e.store.Since(t.Context(), threadN(1), 0, 0)
			assert.Success(t, err)
			assert.Equal(t, "messages stored", len(p.Messages), 1)
		})
	}
}
