package transport_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestAttachmentLostBytes: on Redis, a file whose bytes Redis lost (a
// restart without its data, a failover to a replica that lacked them)
// while its record stayed is answered 404 not_found, the API's JSON error
// before any header of the file, not a 200 whose body is then cut: its
// first chunk gone, or a later one (the chunks are counted before the
// answer starts).
func TestAttachmentLostBytes(t *testing.T) {
	e := startPush(t, pushOptions{backend: storetest.Redis})
	tok := tokenN(1)
	thread := chatrelay.ThreadOf(tok)
	rdb := e.backend.ThreadClient(t, thread)
	body := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: 4 chunks
	for _, c := range []struct{ name, chunk string }{{"the first chunk", "0"}, {"a later chunk", "2"}} {
		at := e.mustUpload(tok, "big.bin", "application/octet-stream", append(body, c.chunk...))
		key := e.backend.KeyPrefix(thread) + "{" + thread + "}:att:" + at.SHA256
		n, err := rdb.HDel(context.Background(), key, c.chunk).Result()
		assert.Success(t, err)
		assert.Equal(t, "chunks deleted", n, int64(1))
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+at.ID, owner(tok))
		assert.Equal(t, c.name+" lost: status", status, http.StatusNotFound)
		assert.Equal(t, c.name+" lost: content type", h.Get("Content-Type"), "application/json")
		assert.Equal(t, c.name+" lost: code", errCode(t, b), chatrelay.NotFound)
	}
}
