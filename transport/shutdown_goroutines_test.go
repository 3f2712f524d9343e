package transport_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/transport"
)

// TestShutdownEndsSessionGoroutines: with a WebSocket and an SSE stream
// open, Shutdown ends every goroutine of the transport they started: the
// turners that ran their turns (kept waiting an hour for the next turn
// here, so that only Shutdown can end them), the streams' readers and
// handlers.
func TestShutdownEndsSessionGoroutines(t *testing.T) { // not parallel: reads every goroutine's stack
	before := goroutineStacks()
	e := startPush(t, pushOptions{server: func(s *transport.Server) { transport.SetTurnerIdle(s, time.Hour) }})
	tok := tokenN(1)
	e.mustPost(tok, "before")
	s := e.mustSSE("/api/chat/stream", tok, nil)
	assert.Equal(t, "SSE ready", s.nextEvent(t).Event, "ready")
	assert.Equal(t, "SSE backlog", s.nextEvent(t).Event, "message")
	c := e.mustWS("/api/chat/ws", tok)
	assert.Equal(t, "WS ready", nextWS(t, c).Type, "ready")
	assert.Equal(t, "WS backlog", nextWS(t, c).Type, "message")
	e.mustPost(tok, "live: a turn on each stream")
	assert.Equal(t, "SSE live", s.nextEvent(t).Event, "message")
	assert.Equal(t, "WS live", nextWS(t, c).Type, "message")
	assert.Eventually(t, 10*time.Second, "a turner waiting for the next turn", func() bool {
		return len(newGoroutines(before, "transport.(*turners).work")) > 0
	})

	// The clients read on, as a browser does, so that the WebSocket's
	// closing handshake is answered.
	ended := make(chan error, 2)
	go func() {
		for {
			if _, err := s.Next(); err != nil {
				ended <- err
				return
			}
		}
	}()
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				ended <- err
				return
			}
		}
	}()
	e.stop() // Shutdown, then the listener, the feed and the store
	for range 2 {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("a stream still open 10s after Shutdown")
		}
	}
	var left [][]byte
	defer func() {
		if t.Failed() {
			for _, g := range left {
				t.Logf("left:\n%s", g)
			}
		}
	}()
	assert.Eventually(t, 10*time.Second, "no goroutine of the transport left after Shutdown", func() bool {
		left = newGoroutines(before, "github.com/chatrelay/chatrelay/transport.")
		return len(left) == 0
	})
}

// goroutineStacks is every goroutine's stack, by its "goroutine N" line.
func goroutineStacks() map[string][]byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := map[string][]byte{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		head, _, _ := bytes.Cut(g, []byte(" ["))
		stacks[string(head)] = g
	}
	return stacks
}

// newGoroutines is the stacks of the goroutines not in before that have
// a frame whose name holds fn.
func newGoroutines(before map[string][]byte, fn string) [][]byte {
	var found [][]byte
	for head, g := range goroutineStacks() {
		if _, old := before[head]; !old && bytes.Contains(g, []byte(fn)) {
			found = append(found, g)
		}
	}
	return found
}
