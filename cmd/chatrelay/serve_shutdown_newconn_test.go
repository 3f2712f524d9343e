package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestServeShutdownAnswersAConnectionJustOpened: a client opened its
// connection just before the shutdown began and sends its post on it a
// moment later, once the listener is closed (nginx opens a connection a
// request while the server drains, since each answer then closes its
// own). The post is answered, 201 with the whole JSON, and the connection
// closed after it; serve still returns nil. The probe behind nginx found
// such posts cut ("upstream prematurely closed connection": a 502 to a
// post that may have run), as many as one in two restarts: the shutdown
// closed every connection that had not sent a request yet at once, and
// net/http drops, unanswered, a request it reads once Shutdown began.
func TestServeShutdownAnswersAConnectionJustOpened(t *testing.T) {
	t.Parallel()
	srv := runServe(t, "--data", t.TempDir(), "--log-level", "error")
	addr := strings.TrimPrefix(srv.base, "http://")
	conn, err := net.Dial("tcp", addr)
	assert.Success(t, err)
	defer conn.Close()
	// A request on a connection of its own, answered: the server accepts
	// connections in the order they came, so it has accepted conn too.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get(srv.base + chatrelay.PathHealthz)
	assert.Success(t, err)
	resp.Body.Close()

	srv.stop() // SIGTERM
	// The shutdown has begun once the listener refuses.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
		if err == nil {
			c.Close()
		}
		assert.True(t, time.Now().Before(deadline), "the listener still accepts 10 s after SIGTERM")
		time.Sleep(2 * time.Millisecond) // a poll's pace
	}
	body := `{"text":"sent as the shutdown began"}`
	fmt.Fprintf(conn, "POST /api/chat/post HTTP/1.1\r\nHost: %s\r\nX-Chat-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, cliToken, len(body), body)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	assert.Success(t, err) // before the fix: EOF, the post unanswered
	b, err := io.ReadAll(resp.Body)
	assert.Success(t, err)
	assert.Equal(t, "status of the post", resp.StatusCode, http.StatusCreated)
	var a struct {
		Success bool   `json:"success"`
		ID      string `json:"id"`
	}
	assert.Success(t, json.Unmarshal(b, &a))
	assert.True(t, a.Success && a.ID != "", "answer %s", b)
	assert.True(t, resp.Close, "the answer during the shutdown does not close its connection")
	select {
	case err := <-srv.done:
		assert.Success(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve still running 10s after the signal")
	}
}
