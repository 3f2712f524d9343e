package transport_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestStalledUploadsHoldNoSlot: uploads share a bound on how many take
// their bytes in at once, but one whose client stalls mid-body holds
// none of it: with more stalled uploads than cores, another upload and a
// post still go through, and the stalled ones finish once their clients
// send the rest.
func TestStalledUploadsHoldNoSlot(t *testing.T) {
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	e.mustPost(tok, "hello")
	send := func(body io.Reader) <-chan int {
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, e.url(chatrelay.PathAttachments), body)
			req.Header.Set("X-Chat-Token", tok)
			req.Header.Set("X-Filename", "f.bin")
			resp, err := e.client.Do(req)
			if err != nil {
				done <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		return done
	}
	wait := func(what string, done <-chan int) {
		t.Helper()
		select {
		case status := <-done:
			assert.Equal(t, what, status, http.StatusCreated)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no answer within 20 s", what)
		}
	}
	piece := bytes.Repeat([]byte("s"), 64<<10)
	var writers []*io.PipeWriter
	t.Cleanup(func() { // a failed run ends its uploads too (before the server shuts down)
		for _, pw := range writers {
			pw.CloseWithError(errors.New("the test is over"))
		}
	})
	var stalled []<-chan int
	for range runtime.GOMAXPROCS(0) + 1 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		stalled = append(stalled, send(pr))
		_, err := pw.Write(piece) // taken by the client: then it stalls
		assert.Success(t, err)
	}
	wait("an upload while the others stall", send(bytes.NewReader(piece)))
	e.mustPost(tok, "a post while uploads stall")
	for i, pw := range writers {
		_, err := pw.Write(piece)
		assert.Success(t, err)
		pw.Close()
		wait("a stalled upload, resumed", stalled[i])
	}
}
