package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
)

// TestServeShutdownWithOpenStreams runs the real "serve" and cancels its
// context, as SIGTERM does, while an SSE stream and a WebSocket are open:
// run must return nil within 5s, the SSE stream must end and the WebSocket
// must be closed with 1001 (going away).
func TestServeShutdownWithOpenStreams(t *testing.T) {
	t.Parallel()
	srv := runServe(t, "--data", t.TempDir(), "--fsync", "never", "--log-level", "error")
	base := srv.base

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	token := cliToken
	post(t, base+"/", "hello")

	// An SSE stream, read up to its first message.
	req, _ := http.NewRequest(http.MethodGet, base+"/api/chat/stream", nil)
	req.Header.Set("X-Chat-Token", token)
	resp, err := client.Do(req)
	assert.Success(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "stream status", resp.StatusCode, http.StatusOK)
	sse := bufio.NewReader(resp.Body)
	for {
		line, err := sse.ReadString('\n')
		assert.Success(t, err)
		if strings.HasPrefix(line, "id: ") {
			break
		}
	}
	// A WebSocket, read up to its ready frame.
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	ws, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(base, "http")+"/api/chat/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Chat-Token": {token}}})
	assert.Success(t, err)
	defer ws.CloseNow()
	_, frame, err := ws.Read(dctx)
	assert.Success(t, err)
	assert.True(t, strings.Contains(string(frame), `"type":"ready"`), "first frame %s", frame)

	sseEnd, wsEnd := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, sse)
		sseEnd <- err
	}()
	go func() {
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				wsEnd <- err
				return
			}
		}
	}()

	start := time.Now()
	srv.stop() // SIGTERM
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	select {
	case err := <-srv.done:
		assert.Success(t, err)
		t.Logf("serve returned %v after the signal", time.Since(start))
	case <-deadline.C:
		t.Fatal("serve still running 5s after the signal")
	}
	select {
	case err := <-sseEnd:
		assert.True(t, err == nil, "the SSE stream ended with %v, want a clean end", err)
	case <-deadline.C:
		t.Fatal("the SSE stream is still open after serve returned")
	}
	select {
	case err := <-wsEnd:
		assert.Equal(t, "WebSocket close status", websocket.CloseStatus(err), websocket.StatusGoingAway)
	case <-deadline.C:
		t.Fatal("the WebSocket is still open after serve returned")
	}
}

// TestServeShutdownWithAnUnusedConnection: a client holds a connection it
// has sent nothing on (an HTTP client's spare dial, a browser's
// preconnect) when the server is told to stop: run must still return nil
// within its 5 s, and the connection must be closed. (net/http waits for
// such a connection until it is 5 s old: serve returned "context deadline
// exceeded", as seen under the MCP tests, whose SDK client dials spares.)
func TestServeShutdownWithAnUnusedConnection(t *testing.T) {
	t.Parallel()
	srv := runServe(t, "--data", t.TempDir(), "--fsync", "never", "--log-level", "error")
	base := srv.base

	unused, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	assert.Success(t, err)
	defer unused.Close()
	// A request on a connection of its own, answered: the server accepts
	// connections in the order they came (the listen queue), so it has
	// accepted the unused one before this one.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(base + chatrelay.PathHealthz)
	assert.Success(t, err)
	resp.Body.Close()
	assert.Equal(t, "healthz", resp.StatusCode, http.StatusOK)

	srv.stopped(t) // SIGTERM
	unused.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = unused.Read(make([]byte, 1))
	assert.True(t, err == io.EOF, "the unused connection after serve returned: %v, want closed (EOF)", err)
}

// TestServeShutdownWithAStalledUpload: a client stops sending in the
// middle of an upload's body when the server is told to stop: run must
// still return nil within its 5 s (the upload is cut at the end of the
// grace the streams get), and the upload must leave nothing: no temp file
// left for the hourly sweep, no Redis staging key left for its 2 h.
func TestServeShutdownWithAStalledUpload(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"file", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			serveShutdownWithAStalledUpload(t, backend)
		})
	}
}

func serveShutdownWithAStalledUpload(t *testing.T, backend string) {
	dir := t.TempDir()
	args := []string{"--data", dir, "--fsync", "never", "--log-level", "error"}
	left := func() []string { // what an upload being received leaves
		m, _ := filepath.Glob(filepath.Join(dir, "chat", ".*.upload.tmp-*"))
		return m
	}
	if backend == "redis" {
		rs := redistest.StartServer(t, redistest.ServerOptions{})
		args = append(args, "--store", rs.URL())
		rdb := rs.Client(t)
		left = func() []string {
			keys, err := rdb.Keys(context.Background(), "*:att:up:*").Result()
			assert.Success(t, err)
			return keys
		}
	}
	srv := runServe(t, args...)
	base := srv.base

	token := cliToken
	post(t, base+"/", "hello")

	partUpload(t, base, token)
	assert.Eventually(t, 10*time.Second, "the upload being received", func() bool { return len(left()) == 1 })

	srv.stopped(t) // SIGTERM
	assert.Equal(t, "what the upload left", len(left()), 0)
}

// partUpload starts an upload of 1 MiB to the server at base as token, of
// which it sends 300 KiB, and returns its connection (closed at the end
// of the test).
func partUpload(t *testing.T, base, token string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	assert.Success(t, err)
	t.Cleanup(func() { conn.Close() })
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nX-Chat-Token: %s\r\nX-Filename: part.bin\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
		chatrelay.PathAttachments, token, 1<<20)
	_, err = conn.Write(append([]byte(head), make([]byte, 300<<10)...))
	assert.Success(t, err)
	return conn
}

// TestServeShutdownCutUploadIsRetryable: an upload still being received
// when the shutdown's grace is over is cut, and its client is told to
// send it again (503 store_unavailable, retryable), not that its upload
// broke off (400 invalid_attachment, not retryable): before the fix a
// client that was still sending, only slowly, was told the upload was its
// fault and would not retry it.
func TestServeShutdownCutUploadIsRetryable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := runServe(t, "--data", dir, "--fsync", "never", "--log-level", "error")
	base := srv.base
	post(t, base+"/", "hello")

	conn := partUpload(t, base, cliToken)
	assert.Eventually(t, 10*time.Second, "the upload being received", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "chat", ".*.upload.tmp-*"))
		return len(m) == 1
	})

	srv.stopped(t) // SIGTERM
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	assert.Success(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "status of the cut upload", resp.StatusCode, http.StatusServiceUnavailable)
	assert.True(t, strings.Contains(string(body), `"code":"store_unavailable"`) && strings.Contains(string(body), `"retryable":true`),
		"the cut upload's answer: %s", body)
}

// TestServeShutdownWithAPostWaitingForALock: another process (a stuck
// host CLI) holds a thread's lock while posts wait for it when the server
// is told to stop. The server must still stop within its 5 s: the posts
// still waiting when the grace is over give up, answered 503
// store_unavailable (retryable). Before the fix run waited for them, each
// up to the lock's 10 s in turn, and the change feed waited behind them.
//
// Not parallel: it counts the requests waiting for a thread's lock, and
// the package's parallel tests run only once it is done.
func TestServeShutdownWithAPostWaitingForALock(t *testing.T) {
	dir := t.TempDir()
	srv := runServe(t, "--data", dir, "--fsync", "never", "--log-level", "error")
	post(t, srv.base+"/", "hello")

	lock, err := os.OpenFile(filepath.Join(dir, "chat", chatrelay.ThreadOf(cliToken)+".json.lock"), os.O_RDWR, 0)
	assert.Success(t, err)
	defer lock.Close()
	assert.Success(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	statuses := make(chan int, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest("POST", srv.base+"/api/chat/post", strings.NewReader(`{"text":"waits"}`))
			req.Header.Set("X-Chat-Token", cliToken)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			res.Body.Close()
			statuses <- res.StatusCode
		}()
	}
	assert.Eventually(t, 10*time.Second, "both posts wait for the thread's lock", func() bool {
		return requestsWaitingForALock() == 2
	})

	start := time.Now()
	srv.stop() // SIGTERM
	select {
	case err := <-srv.done:
		assert.Success(t, err)
	case <-time.After(8 * time.Second):
		t.Fatal("serve still running 8 s after the signal, while posts wait for a lock")
	}
	t.Logf("stopped in %v", time.Since(start))
	for range 2 {
		assert.Equal(t, "a waiting post's answer", <-statuses, http.StatusServiceUnavailable)
	}
}

// requestsWaitingForALock counts the goroutines serving an HTTP request
// that wait for a thread's lock. Only requests: the retention sweep run at
// start may wait for the same lock (on a loaded machine it starts after
// the test took it), and counting it made the count 3 until its wait of
// 10 s was over.
func requestsWaitingForALock() int {
	buf := make([]byte, 1<<20)
	n := 0
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "filestore.(*File).lockState(") && strings.Contains(g, "net/http.(*conn).serve(") {
			n++
		}
	}
	return n
}
