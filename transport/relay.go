package transport

import (
	"context"
	"time"

	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/store"
)

// Run feeds the hub from the store's change feed until ctx is done. It is
// the hub's only input, so a message is pushed only after it is stored.
// Streams wait for Ready before they read their backlog.
func (s *Server) Run(ctx context.Context) error {
	s.ops.feeds.Add(1) // /readyz: the feed is live while Run runs
	defer s.ops.feeds.Add(-1)
	return s.store.Follow(ctx, func(b store.Batch) {
		s.ops.feedBatch(b)
		switch {
		case b.Ready:
			s.readyMu.Do(func() { close(s.ready) })
		case b.Reset:
			s.hub.Reset(b.Thread)
		case s.hub.Has(b.Thread):
			events := make([]*hub.Event, len(b.Messages))
			now := time.Now()
			for i, e := range b.Messages {
				events[i] = hub.NewEvent(b.Thread, e.Epoch, e.JSON)
				events[i].Stored = now
			}
			s.hub.Publish(b.Thread, events...)
		}
	})
}

// Ready is closed once Run's feed is registered.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Shutdown ends every stream: the hub drops its subscribers with
// hub.ErrClosed, SSE handlers flush and return, WebSockets close with 1001
// (going away). It waits for the WebSocket handlers, which
// http.Server.Shutdown does not track, until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	s.hub.Close()
	done := make(chan struct{})
	go func() {
		s.wsWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
