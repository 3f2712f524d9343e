package transport_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// TestDuplicateUploadAnsweredWhileTheLaneIsBusy: a duplicate upload is
// answered while other uploads hold every turn of the background lane,
// and its temp file is removed after the answer, under a turn; a
// Shutdown while the lane is still busy removes it in place before it
// returns, so no temp file is left. (Before, the answer waited for a
// turn to remove the temp file.) The upload is empty, so that its bytes
// need no turn either.
func TestDuplicateUploadAnsweredWhileTheLaneIsBusy(t *testing.T) {
	e := startPush(t, pushOptions{backend: storetest.File})
	tok := tokenN(1)
	e.mustUpload(tok, "a.txt", "text/plain", nil)
	temps := func() int {
		m, err := filepath.Glob(filepath.Join(e.dir, "chat", ".*.upload.tmp-*"))
		assert.Success(t, err)
		return len(m)
	}
	leave := transport.HoldLane()
	defer leave()
	answered := make(chan int, 1)
	go func() {
		status, _ := e.upload(owner(tok), "b.txt", "text/plain", strings.NewReader(""))
		answered <- status
	}()
	select {
	case status := <-answered:
		assert.Equal(t, "the duplicate's status", status, http.StatusCreated)
	case <-time.After(20 * time.Second):
		t.Fatal("the duplicate's answer waited for a turn of the busy lane")
	}
	assert.Equal(t, "temp files while the lane is busy", temps(), 1)
	e.stop() // Shutdown, the lane still busy
	assert.Equal(t, "temp files after Shutdown", temps(), 0)
}
