package transport_test

import (
	"fmt"
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
	temps := func() int { return uploadTemps(t, e.dir) }
	leave := transport.HoldLane()
	defer leave()
	answered := make(chan int, 1)
	go func() {
		status, _ := e.upload(owner(tok), "b.txt", "text/plain", strings.NewReader(""))
		answered <- status
	}()
	status := assert.Receive(t, answered, "the duplicate's answer, which waited for a turn of the busy lane")
	assert.Equal(t, "the duplicate's status", status, http.StatusCreated)
	assert.Equal(t, "temp files while the lane is busy", temps(), 1)
	e.stop() // Shutdown, the lane still busy
	assert.Equal(t, "temp files after Shutdown", temps(), 0)
}

// TestDuplicateUploadsWaitPastTheBound: while the lane is busy, at most
// AfterMax duplicates are answered at once with their temp files left to
// remove; the next one's answer waits for its turn, as before, so that a
// client repeating a duplicate is held back by its own answers rather
// than piling up goroutines and temp files (review8: 98 such uploads
// left 98 of each). Once the lane frees, it is answered and every temp
// file is removed.
func TestDuplicateUploadsWaitPastTheBound(t *testing.T) {
	e := startPush(t, pushOptions{backend: storetest.File})
	tok := tokenN(1)
	e.mustUpload(tok, "a.txt", "text/plain", nil)
	temps := func() int { return uploadTemps(t, e.dir) }
	leave := transport.HoldLane()
	released := false
	defer func() {
		if !released {
			leave()
		}
	}()
	for i := range transport.AfterMax {
		status, _ := e.upload(owner(tok), fmt.Sprintf("d%d.txt", i), "text/plain", strings.NewReader(""))
		assert.Equal(t, "a duplicate's status within the bound", status, http.StatusCreated)
	}
	assert.Equal(t, "temp files within the bound", temps(), transport.AfterMax)
	answered := make(chan int, 1)
	go func() {
		status, _ := e.upload(owner(tok), "past.txt", "text/plain", strings.NewReader(""))
		answered <- status
	}()
	assert.Eventually(t, 10*time.Second, "the duplicate past the bound to wait for a turn", func() bool {
		return transport.LaneWaiting() == transport.AfterMax+1
	})
	select {
	case status := <-answered:
		t.Fatalf("the duplicate past the bound was answered %d while the lane was busy", status)
	default:
	}
	leave()
	released = true
	assert.Equal(t, "the duplicate past the bound's status", <-answered, http.StatusCreated)
	assert.Eventually(t, 10*time.Second, "every temp file removed", func() bool { return temps() == 0 })
}

// uploadTemps is how many uploads' temp files the file store under dir
// holds.
func uploadTemps(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "chat", ".*.upload.tmp-*"))
	assert.Success(t, err)
	return len(m)
}
