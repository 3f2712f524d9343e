package transport_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/transport"
)

// TestSlowBodyIsRetryable: a post whose body does not arrive within the
// server's ReadTimeout (here 300 ms, and the WriteTimeout too, which runs
// out with it; 30 s each in serve) stored nothing, and
// its client should send it again: 408 request_timeout, retryable, not
// 400 invalid_json (which says the body is wrong, and a careful client
// then drops the person's message). The same on the v1 path and v2.
func TestSlowBodyIsRetryable(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{http: func(s *http.Server) { s.ReadTimeout, s.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond }})
	token := tokenN(1)
	for _, path := range []string{chatrelay.PathPost, chatrelay.PathPost + ".php", chatrelay.PathPost + "?v=2"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
		assert.Success(t, err)
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second)) // bounds the test if no answer comes
		// Half the body, then nothing more: the client's link stalled.
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-Chat-Token: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":", path, token)
		assert.Success(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		assert.Success(t, err)
		b, err := io.ReadAll(resp.Body)
		assert.Success(t, err)
		var a struct {
			Code      chatrelay.Code `json:"code"`
			Retryable bool           `json:"retryable"`
		}
		assert.Success(t, json.Unmarshal(b, &a))
		assert.Equal(t, path+": status", resp.StatusCode, http.StatusRequestTimeout)
		assert.Equal(t, path+": code", a.Code, chatrelay.RequestTimeout)
		assert.True(t, a.Retryable, "%s: not retryable: %s", path, b)
		assert.True(t, resp.Header.Get("Retry-After") != "", "%s: no Retry-After", path)
	}
	status, _, b := e.do(http.MethodGet, chatrelay.PathPoll, token, "", nil)
	assert.Equal(t, "poll", status, http.StatusOK)
	assert.True(t, !strings.Contains(string(b), `"author"`), "a slow post stored a message: %s", b)
}

// TestSlowUploadIsRetryable: an upload whose body stops arriving before
// its end, past the transfer time (here 300 ms; 10 minutes in serve),
// keeps nothing and is answered 408 request_timeout (retryable), not 400
// invalid_attachment ("the upload broke off"), which a client takes as a
// refusal of the file.
func TestSlowUploadIsRetryable(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{config: func(c *transport.Config) { c.TransferTime = 300 * time.Millisecond }})
	token := tokenN(1)
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
	assert.Success(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // bounds the test if no answer comes
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-Chat-Token: %s\r\nX-Filename: a.bin\r\nContent-Length: 1000\r\n\r\nhalf", chatrelay.PathAttachments, token)
	assert.Success(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	assert.Success(t, err)
	b, err := io.ReadAll(resp.Body)
	assert.Success(t, err)
	assert.Equal(t, "status", resp.StatusCode, http.StatusRequestTimeout)
	assert.Equal(t, "code", errCode(t, b), chatrelay.RequestTimeout)
}
