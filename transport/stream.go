package transport

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"encoding/json"
	"errors"

	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/store"
)

// stream is one live subscriber's start: registered with the hub before its
// backlog was read, so nothing falls between the two.
type stream struct {
	sub     *hub.Subscription[*Event]
	backlog store.Page
	// last is the newest epoch the client has or will have from the
	// backlog; live events at or below it are skipped.
	last    int64
	release func()
}

func (st *stream) close() {
	st.sub.Close()
	st.release()
}

// openStream registers a subscriber of thread and reads what it missed
// after cursor: the newest 50 messages when cursor is 0, otherwise every
// retained message after it.
func (s *Server) openStream(ctx context.Context, thread, ip string, cursor int64) (*stream, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release, err := s.streams.Acquire(ctx, thread, ip)
	if err != nil {
		return nil, err
	}
	sub, err := s.hub.Subscribe(thread)
	if err != nil {
		release()
		return nil, &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the server is shutting down", Retry: 1e9, Err: err}
	}
	page, err := s.store.Since(ctx, thread, cursor, limitFor(cursor))
	if err != nil {
		sub.Close()
		release()
		return nil, err
	}
	return &stream{sub: sub, backlog: page, last: max(cursor, page.Cursor), release: release}, nil
}

// readyFrame is the data of the first frame of a stream.
type readyFrame struct {
	Type     string `json:"type,omitempty"` // "ready" on the WebSocket; omitted on SSE
	Thread   string `json:"thread"`
	Cursor   int64  `json:"cursor"`
	Awaiting bool   `json:"awaiting"`
}

func marshalReady(typ string, p store.Page) []byte {
	b, _ := json.Marshal(readyFrame{Type: typ, Thread: p.Thread, Cursor: p.Cursor, Awaiting: p.Awaiting})
	return b
}

// cursorOf reads a stream's resume point: Last-Event-ID wins over ?since=.
func cursorOf(lastEventID string, hasLastEventID bool, since string) (int64, error) {
	if hasLastEventID {
		return parseSince(lastEventID)
	}
	return parseSince(since)
}

// closeReason says why the hub ended a subscription, for logs.
func closeReason(err error) string {
	switch {
	case errors.Is(err, hub.ErrSlow):
		return "slow"
	case errors.Is(err, hub.ErrClosed):
		return "shutdown"
	case errors.Is(err, hub.ErrReset):
		return "reset"
	default:
		return "closed"
	}
}
