package transport_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

func TestShutdownEndsStreams(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "before")

		var sse []*sseStream
		var ws []*websocket.Conn
		for i := range 3 {
			s := e.mustSSE("/api/chat/stream", tokenN(i+1), nil)
			assert.Equal(t, "SSE ready", s.nextEvent(t).Event, "ready")
			sse = append(sse, s)
			c := e.mustWS("/api/chat/ws", tokenN(i+1))
			assert.Equal(t, "WS ready", nextWS(t, c).Type, "ready")
			ws = append(ws, c)
		}
		ts := e.mustSSE("/api/chat/stream?ticket="+e.ticket(tok), "", nil)
		ts.nextEvent(t)
		sse = append(sse, ts)
		tw := e.mustWS("/api/chat/ws?ticket="+e.ticket(tok), "")
		nextWS(t, tw)
		ws = append(ws, tw)
		// Drain the backlog of the token streams of thread 1.
		sse[0].nextEvent(t)
		nextWS(t, ws[0])
		ts.nextEvent(t)
		nextWS(t, tw)

		// Every client reads until its stream ends.
		type end struct {
			sse    bool
			err    error
			status websocket.StatusCode
		}
		ends := make(chan end, len(sse)+len(ws))
		for _, s := range sse {
			go func() {
				for {
					if _, err := s.Next(); err != nil {
						ends <- end{sse: true, err: err}
						return
					}
				}
			}()
		}
		for _, c := range ws {
			go func() {
				for {
					if _, _, err := c.Read(context.Background()); err != nil {
						ends <- end{err: err, status: websocket.CloseStatus(err)}
						return
					}
				}
			}()
		}

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		assert.Success(t, e.srv.Shutdown(ctx))
		for range len(sse) + len(ws) {
			select {
			case got := <-ends:
				if got.sse {
					assert.True(t, errors.Is(got.err, io.EOF), "an SSE stream ended with %v, want a clean end", got.err)
				} else {
					assert.Equal(t, "WebSocket close status", got.status, websocket.StatusGoingAway)
				}
			case <-ctx.Done():
				t.Fatal("streams still open 5s after Shutdown")
			}
		}
		t.Logf("Shutdown ended %d streams in %v", len(sse)+len(ws), time.Since(start))

		// After Shutdown, a new stream is refused at once, not left hanging.
		s, resp, body, err := e.openSSE(ctx, "/api/chat/stream", tok, nil)
		assert.Success(t, err)
		assert.True(t, s == nil && resp.StatusCode == http.StatusServiceUnavailable, "a stream after Shutdown: %d %s", resp.StatusCode, body)
	})
}

// TestNoLeaksAfterChurn opens and drops streams of both kinds, some at
// random points mid-stream, then stops the server: no goroutine may be
// left (on Redis: none of the store's, its feed's or its limiters'), and
// every stream's place under the limits is given back.
func TestNoLeaksAfterChurn(t *testing.T) { // not parallel: goleak sees the whole process
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) { noLeaksAfterChurn(t, backend) })
	}
}

func noLeaksAfterChurn(t *testing.T, backend string) {
	if backend == storetest.Redis {
		storetest.SharedServer(t) // started before the count: it outlives the test
	}
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the server's cleanup
	e := startPush(t, pushOptions{backend: backend})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 60 {
		tok := tokenN(i % 3)
		e.mustPost(tok, "churn "+strconv.Itoa(i))
		if i%2 == 0 {
			s, resp, body, err := e.openSSE(context.Background(), "/api/chat/stream?since="+strconv.Itoa(rng.IntN(2)), tok, nil)
			assert.Success(t, err)
			if s == nil {
				t.Fatalf("SSE: %d %s", resp.StatusCode, body)
			}
			for range rng.IntN(3) {
				s.nextEvent(t)
			}
			s.Close()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, _, err := e.dialWS(ctx, "/api/chat/ws", tok, nil)
			cancel()
			assert.Success(t, err)
			for range rng.IntN(3) {
				nextWS(t, c)
			}
			if rng.IntN(2) == 0 {
				c.CloseNow()
			} else {
				c.Close(websocket.StatusNormalClosure, "bye")
			}
		}
	}
	// 20 streams of one thread fit again: every dropped stream released
	// its place (the default limit is 20 per thread).
	deadline := time.Now().Add(5 * time.Second)
	for open := 0; open < 20; {
		s, resp, _, err := e.openSSE(context.Background(), "/api/chat/stream", tokenN(0), nil)
		assert.Success(t, err)
		if s == nil {
			assert.Equal(t, "status", resp.StatusCode, http.StatusTooManyRequests)
			if time.Now().After(deadline) {
				t.Fatalf("only %d of 20 streams open 5s after the churn: dropped streams keep their places", open)
			}
			<-time.After(10 * time.Millisecond) // dropped streams are still ending
			continue
		}
		t.Cleanup(s.Close)
		open++
	}
	e.stop()
}
