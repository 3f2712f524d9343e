package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// stuckWriter is a standard output whose reader stops reading at the line
// that holds stuckAt: that write blocks until release is closed (then it
// fails), as a write on a full pipe blocks. Earlier lines are kept.
type stuckWriter struct {
	stuckAt string
	entered chan struct{} // closed once the write is blocked
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	b       bytes.Buffer
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.stuckAt)) {
		w.once.Do(func() { close(w.entered) })
		<-w.release
		return 0, errors.New("released")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestMCPStopsWithAnAnswerStuck: `chatrelay mcp` whose client stopped
// reading its standard output but keeps it open (an answer's write blocks
// on the full pipe) ends at SIGTERM (MCP's stdio shutdown: close the
// input, wait, SIGTERM) with exit status 0, whether its input is still
// open or ended; meanwhile the stuck answer holds nothing of the store (a
// reply to the same thread is stored). It hung until SIGKILL: the SDK's
// close of the session waits for the call being answered, whose write
// never returned (the client's pipe full), and the stuck write held the
// lock of standard output that the end of the command asks for its error.
func TestMCPStopsWithAnAnswerStuck(t *testing.T) {
	t.Parallel()
	for _, inputOpen := range []bool{true, false} {
		data := seed(t)
		out := &stuckWriter{stuckAt: `"id":3`, entered: make(chan struct{}), release: make(chan struct{})}
		t.Cleanup(func() { close(out.release) }) // the blocked write returns, at last
		in, client := io.Pipe()
		t.Cleanup(func() { client.Close() })
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		var stderr lockedBuffer
		ended := make(chan error, 1)
		go func() {
			ended <- run(ctx, []string{"mcp", "--data", data, "--fsync", "never"}, env(nil), in, out, &stderr)
		}()
		_, err := io.WriteString(client, mcpInit+"\n"+
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chatrelay_send","arguments":{"thread":"`+threadOld+`","text":"answered on a pipe no one reads"}}}`+"\n")
		assert.Success(t, err)
		if !inputOpen {
			client.Close()
		}
		select {
		case <-out.entered:
		case err := <-ended:
			t.Fatalf("input open %v: chatrelay mcp ended before its answer was written: %v; stderr: %s", inputOpen, err, stderr.String())
		}
		r := runCLI(t, nil, "", "reply", threadOld, "a reply while the agent's answer is stuck", "--data", data, "--fsync", "never")
		assert.True(t, r.err == nil, "input open %v: reply while an answer of mcp is stuck: %v; %s", inputOpen, r.err, r.stderr)
		r = runCLI(t, nil, "", "show", threadOld, "--json", "--data", data)
		assert.Success(t, r.err)
		assert.True(t, strings.Contains(r.stdout, "answered on a pipe no one reads") && strings.Contains(r.stdout, "a reply while the agent's answer is stuck"),
			"input open %v: the thread: %s", inputOpen, r.stdout)

		stop() // SIGTERM
		select {
		case err := <-ended:
			assert.True(t, err == nil, "input open %v: chatrelay mcp stopped with an answer stuck: %v (exit %d); stderr: %s", inputOpen, err, exitCode(err), stderr.String())
		case <-time.After(10 * time.Second):
			t.Fatalf("input open %v: chatrelay mcp still runs 10 s after SIGTERM, with an answer stuck on its standard output", inputOpen)
		}
	}
}
