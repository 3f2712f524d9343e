package transport

import (
	"context"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Run feeds the hub from the store's change feed until ctx is done. It is
// the hub's only input, so a change is pushed only after it is stored.
// Streams wait for Ready before they read their backlog. Run also owns
// the timers that expire pending interactions (expiry.go).
func (s *Server) Run(ctx context.Context) error {
	s.ops.feeds.Add(1) // /readyz: the feed is live while Run runs
	defer s.ops.feeds.Add(-1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	x := newExpiries(s)
	rechecks := newThreadQueue()
	var wg sync.WaitGroup
	wg.Go(func() { x.run(ctx) })
	// The pusher stops once the feed has stopped handing it changes (its
	// own context ends when Follow has returned): a batch the relay takes
	// as ctx ends is queued before the pusher hands over what it holds,
	// never after (webpushsend.go handOver).
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	if s.push != nil && !s.push.noSend {
		wg.Go(func() { s.push.run(pctx) }) // push delivery (webpushsend.go)
	}
	wg.Go(func() { // a thread's participants changed: look at its live grants
		for {
			threads, ok := rechecks.pop(ctx)
			if !ok {
				return
			}
			for _, th := range threads {
				s.live.recheck(th)
			}
		}
	})
	defer wg.Wait()
	defer cancel()
	err := s.feed.Follow(ctx, "", func(b store.Batch) error {
		s.relay(b, x, rechecks)
		return nil
	})
	pcancel()
	return err
}

// relay takes a batch of the store's feed to the live streams, the
// expiry timers and the participants' rechecks.
func (s *Server) relay(b store.Batch, x *expiries, rechecks *threadQueue) {
	s.ops.feedBatch(b)
	x.noteBatch(b)
	s.push.note(b) // never waits
	if b.Participants {
		rechecks.push(b.Thread)
		return
	}
	switch {
	case b.Ready:
		s.readyMu.Do(func() { close(s.ready) })
	case b.Reset && b.Thread == "": // the relay fell behind the feed: every stream resumes
		s.hub.ResetAll()
		x.reload()
	case b.Reset:
		s.hub.Reset(b.Thread)
		x.reload()
	case s.hub.Has(b.Thread):
		s.hub.Publish(b.Thread, NewEvents(b.Thread, b.Messages, time.Now())...)
	}
}

// Ready is closed once Run's feed is registered.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// shutdownGrace is how long Shutdown lets streams end on their own: a live
// client takes its last frames and answers the WebSocket close within a
// round trip.
const shutdownGrace = 2 * time.Second

// Shutdown ends every stream: the hub drops its subscribers with
// hub.ErrClosed, SSE handlers flush and return, WebSockets close with 1001
// (going away); new streams and uploads are refused. Streams still open
// after shutdownGrace (or when ctx is done) belong to clients that stopped
// reading, blocked in a write or in the close handshake: their connections
// are cut; uploads and other requests whose bodies are still arriving then
// belong to clients that stopped sending: their reads are cut (the
// request fails, 503 store_unavailable, and leaves nothing: cutAtAbort), and
// writes still waiting (for a thread's lock another process holds) give
// up, so that http.Server.Shutdown need not wait for them past its
// deadline. It
// waits for the stream handlers (http.Server.Shutdown does not track
// hijacked WebSockets) and the upload handlers until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	defer s.turners.stop()
	s.Drain()
	if s.cfg.MCP != nil {
		s.cfg.MCP.Close() // its calls in flight end, so the listener's Shutdown need not wait for them
	}
	s.streamers.Close()
	s.uploads.Close()
	s.hub.Close()
	// Writes still waiting when the grace is over (for a thread's lock
	// another process holds) give up then (settled), streams or not:
	// http.Server.Shutdown waits for their handlers.
	time.AfterFunc(shutdownGrace, s.abort)
	done := make(chan struct{})
	go func() {
		s.streamers.Wait()
		s.uploads.Wait()
		close(done)
	}()
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	s.abort()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errShuttingDown = &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the server is shutting down", Retry: time.Second}

// threadQueue is a set of threads waiting for a look, filled without
// blocking (the feed pushes) and drained by one goroutine.
type threadQueue struct {
	mu   sync.Mutex // guards set
	set  map[string]bool
	wake chan struct{}
}

func newThreadQueue() *threadQueue {
	return &threadQueue{set: make(map[string]bool), wake: make(chan struct{}, 1)}
}

func (q *threadQueue) push(thread string) {
	q.mu.Lock()
	q.set[thread] = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop waits for threads; ok is false once ctx is done.
func (q *threadQueue) pop(ctx context.Context) (threads []string, ok bool) {
	for {
		q.mu.Lock()
		for th := range q.set {
			threads = append(threads, th)
		}
		clear(q.set)
		q.mu.Unlock()
		if len(threads) > 0 {
			return threads, true
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}
