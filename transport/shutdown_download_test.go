package transport_test

import (
	"context"
	"crypto/rand"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestShutdownCutsADownloadNotRead: a client downloading an attachment
// stops reading (or reads too slowly to end in time) when the server is
// told to stop. Its connection is cut at the end of the grace, as a
// stream's is (it resumes with a Range, here or on another node), and
// http.Server.Shutdown ends within its deadline. Before the fix the
// download's write waited for the reader up to its 10 minutes, so the
// listener's Shutdown ran out its 5 s and "chatrelay serve" exited 1 with
// "context deadline exceeded" on a plain SIGTERM.
func TestShutdownCutsADownloadNotRead(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{listener: func(l net.Listener) net.Listener { return smallBuffers{l} }})
	token := tokenN(1)
	e.mustPost(token, "hello")
	file := make([]byte, 8<<20)
	rand.Read(file)
	a := e.mustUpload(token, "big.bin", "application/octet-stream", file)

	req, err := http.NewRequest(http.MethodGet, e.url("/api/chat/attachments/"+a.ID), nil)
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", token)
	client := smallReadClient()
	resp, err := client.Do(req)
	assert.Success(t, err)
	defer resp.Body.Close() // never read: the client stopped reading
	assert.Equal(t, "download status", resp.StatusCode, http.StatusOK)

	hs := e.ts.Config
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.RegisterOnShutdown(func() { e.srv.Shutdown(ctx) })
	assert.Success(t, hs.Shutdown(ctx))
}
