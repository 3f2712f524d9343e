package transport_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestShutdownCutsAnAnswerNotRead: a client that sends requests and does
// not read their answers (here 60 polls of a thread of 200 long messages,
// pipelined on one connection) when the server is told to stop. The
// connection is cut at the end of the grace, as a stream's is, and
// http.Server.Shutdown ends within its deadline. Before the fix the
// handler's write waited for the reader up to the 30 s WriteTimeout, so
// the listener's Shutdown ran out its 5 s and "chatrelay serve" exited 1
// with "context deadline exceeded" on a plain SIGTERM.
func TestShutdownCutsAnAnswerNotRead(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{listener: func(l net.Listener) net.Listener { return smallBuffers{l} }})
	token := tokenN(1)
	e.mustPost(token, "hello")
	for range 199 {
		_, err := e.store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: strings.Repeat("y", 3990)})
		assert.Success(t, err)
	}

	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
	assert.Success(t, err)
	defer conn.Close() // never read: the client stopped reading
	poll := fmt.Sprintf("GET %s?since=0 HTTP/1.1\r\nHost: x\r\nX-Chat-Token: %s\r\n\r\n", chatrelay.PathPoll, token)
	_, err = conn.Write([]byte(strings.Repeat(poll, 60)))
	assert.Success(t, err)

	hs := e.ts.Config
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.RegisterOnShutdown(func() { e.srv.Shutdown(ctx) })
	assert.Success(t, hs.Shutdown(ctx))
}
