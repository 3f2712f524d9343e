package transport_test

import (
	"bufio"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// rawSSE sends GET path with the token in HTTP/1.proto over a new
// connection and returns the answer's status line, its header and a
// reader of its body (bounded by a 10 s deadline).
func rawSSE(t *testing.T, e *pushEnv, proto, path, token string) (string, textproto.MIMEHeader, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	assert.Success(t, err)
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(conn, "GET "+path+" HTTP/1."+proto+"\r\nHost: chat.test\r\nX-Chat-Token: "+token+"\r\n\r\n")
	assert.Success(t, err)
	tp := textproto.NewReader(bufio.NewReader(conn))
	status, err := tp.ReadLine()
	assert.Success(t, err)
	hdr, err := tp.ReadMIMEHeader()
	assert.Success(t, err)
	return status, hdr, tp.R
}

// TestSSEBodyIsChunked: sseclient-py over urllib3 (as its README shows)
// got no event on a quiet thread: the stream's body ran to the
// connection's close, and urllib3's stream() waits for a whole block of
// such a body. Over HTTP/1.1 the body is chunked, each chunk announcing
// its size, so a client reads each event as it comes: the ready event
// whole in the first chunk, each live message in the next. HTTP/1.0,
// which has no chunks, still gets the body to the close.
func TestSSEBodyIsChunked(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	first := e.mustPost(tok, "one")
	path := "/api/chat/stream?since=" + strconv.FormatInt(first.Epoch, 10)

	status, hdr, body := rawSSE(t, e, "1", path, tok)
	assert.Equal(t, "status", status, "HTTP/1.1 200 OK")
	assert.Equal(t, "Transfer-Encoding", hdr.Get("Transfer-Encoding"), "chunked")
	chunk := func(what string) string {
		t.Helper()
		size, err := body.ReadString('\n')
		assert.Success(t, err)
		n, err := strconv.ParseInt(strings.TrimSuffix(size, "\r\n"), 16, 64)
		assert.True(t, err == nil && n > 0, "%s: %q is no chunk size", what, size)
		b := make([]byte, n+2)
		_, err = io.ReadFull(body, b)
		assert.Success(t, err)
		assert.Equal(t, what+"'s end", string(b[n:]), "\r\n")
		return string(b[:n])
	}
	ready := chunk("the first chunk")
	assert.True(t, strings.Contains(ready, "event: ready\n") && strings.HasSuffix(ready, "}\n\n"), "the first chunk is not the whole ready event: %q", ready)
	live := e.mustPost(tok, "two")
	msg := chunk("the live message's chunk")
	assert.True(t, strings.HasPrefix(msg, "id: "+strconv.FormatInt(live.Epoch, 10)+"\nevent: message\n") && strings.HasSuffix(msg, "}\n\n"),
		"the next chunk is not the live message's whole event: %q", msg)

	status, hdr, body = rawSSE(t, e, "0", path, tok)
	assert.Equal(t, "HTTP/1.0 status", status, "HTTP/1.1 200 OK")
	assert.Equal(t, "HTTP/1.0: Transfer-Encoding", hdr.Get("Transfer-Encoding"), "")
	line, err := body.ReadString('\n')
	assert.Success(t, err)
	assert.Equal(t, "HTTP/1.0: the body's first line", line, "retry: 2000\n")
}
