package transport_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// A client that sends its whole request and then closes its side of the
// connection (shutdown(SHUT_WR), as `nc -N` and some HTTP/1.0 clients
// do) is still reading: net/http cancels the request's context when it
// reads that end, but a write whose request arrived whole is carried
// through on every store. The Redis store used to give up its round trip
// and answer 503 store_unavailable, a write that might have run.
func TestWriteSurvivesItsClientsHalfClose(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		addr := strings.TrimPrefix(e.ts.URL, "http://")
		// send writes one request, closes the connection's sending side,
		// and reads the answer's status.
		send := func(path, token, body string) int {
			t.Helper()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nX-Chat-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				path, addr, token, len(body), body)
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("POST %s: %v", path, err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for i := range 20 { // the end is read while the store works: each a race the write must win
			token := tokenN(700 + i)
			if got := send(chatrelay.PathPost, token, fmt.Sprintf(`{"text":"half-closed %d"}`, i)); got != http.StatusCreated {
				t.Fatalf("post %d: status %d, want 201", i, got)
			}
			p, err := e.store.Since(context.Background(), chatrelay.ThreadOf(token), 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Messages) != 1 || p.Messages[0].Text != fmt.Sprintf("half-closed %d", i) {
				t.Fatalf("post %d: the thread holds %+v, want the one message", i, p.Messages)
			}
			// The other writes of a JSON body or none: a grant, a ticket.
			if got := send(chatrelay.PathParticipants, token, `{"name":"guest"}`); got != http.StatusCreated {
				t.Fatalf("invite %d: status %d, want 201", i, got)
			}
			if got := send(chatrelay.PathTicket, token, ""); got != http.StatusCreated {
				t.Fatalf("ticket %d: status %d, want 201", i, got)
			}
		}
	})
}
