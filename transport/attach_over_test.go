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
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// TestUploadPastTheLimitRefusedAtOnce: an upload without a Content-Length
// is refused (413 attachment_too_large) as soon as the byte past the limit
// arrives, though its client then sends nothing more and does not end its
// body: the server does not wait for the rest of a chunk first (it did,
// holding the request and its temp file until the transfer deadline, 10
// minutes). On both stores.
func TestUploadPastTheLimitRefusedAtOnce(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		const most = 1000
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) { c.MaxAttachmentBytes = most }})
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.url(""), "http://"))
		assert.Success(t, err)
		defer conn.Close()
		// Chunked, the byte past the limit, and then nothing: no last chunk.
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Chat-Token: %s\r\nX-Filename: over.bin\r\n"+
			"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n",
			chatrelay.PathAttachments, tokenN(1), most+1, strings.Repeat("x", most+1))
		assert.Success(t, err)
		assert.Success(t, conn.SetReadDeadline(time.Now().Add(10*time.Second))) // past it: the server waited for more bytes
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		assert.Success(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		assert.Success(t, err)
		assert.Equal(t, "the status of an upload one byte past the limit", resp.StatusCode, http.StatusRequestEntityTooLarge)
		var a struct {
			Code chatrelay.Code `json:"code"`
		}
		assert.Success(t, json.Unmarshal(b, &a))
		assert.Equal(t, "its code", a.Code, chatrelay.AttachmentTooLarge)
	})
}
