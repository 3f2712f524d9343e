package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/store"
)

// This file is the one stream session, shared by SSE and the WebSocket:
//
//	authenticate → cursor → register with the hub → read the backlog →
//	write ready (+ reset) and the backlog → live loop (skipping what the
//	backlog covered, heartbeat while idle) → end with a reason.
//
// A transport supplies only a frameWriter, which frames what the session
// hands it, and its own handshake. Who the stream is for (the principal)
// and what it may see (the view) are decided here, once, for both.

// principal is who a request acts as.
type principal struct {
	thread  string
	canPost bool // the thread's token; a ticket only reads
	// ctx ends when the principal's right to the thread ends; the
	// session then ends too. Background for a token.
	ctx context.Context
}

// view is what a stream or a poll shows its principal. Today every
// principal sees the v1 view; the frames of each view are encoded once per
// change and shared by its subscribers (Event).
type view struct{}

// streamRequest is a stream asked for: by whom, what view, from where.
type streamRequest struct {
	p      principal
	v      view
	cursor int64
	ip     string
}

// frameWriter writes one stream's frames in its transport's framing. Only
// the session's goroutine calls it.
type frameWriter interface {
	// start writes the opening: ready, reset if the reader missed
	// messages it can no longer get, then the backlog, oldest first.
	start(o opening) error
	// events writes live events of the thread, in order.
	events(evs []*Event) error
	// heartbeat keeps an idle stream open through proxies and finds a
	// client that left.
	heartbeat() error
	// end tells the client why the stream ends, if its transport can:
	// why is a hub error (hub.ErrSlow, ErrReset, ErrClosed).
	end(why error)
	// gone is closed when the client left or the connection failed.
	gone() <-chan struct{}
	// name is the transport's metrics label.
	name() string
}

// opening is what a stream starts with.
type opening struct {
	ready   readyFrame
	reset   bool
	backlog []store.Entry
}

// session is one open stream: registered with the hub, its backlog read.
type session struct {
	s       *Server
	req     streamRequest
	sub     *hub.Subscription[*Event]
	backlog store.Page
	release func()
}

// streamRequest authenticates a stream request (a ticket or the token)
// and reads its cursor. It touches nothing on disk.
func (s *Server) streamRequest(r *http.Request, cursor string) (streamRequest, error) {
	p, err := s.streamAuth(r)
	if err != nil {
		return streamRequest{}, err
	}
	c, err := parseSince(cursor)
	if err != nil {
		return streamRequest{}, err
	}
	return streamRequest{p: p, cursor: c, ip: limitKey(clientIP(r, s.cfg.Trusted))}, nil
}

// openSession takes a stream slot, registers a subscriber with the hub
// and then reads what the client missed after its cursor (the newest
// PollPage messages without one), so that nothing falls between the two.
// Its errors are the contract's refusals (too_many_streams,
// thread_unreadable, store_unavailable, and shutting down); the caller
// answers them as its transport can, before the stream starts.
func (s *Server) openSession(ctx context.Context, req streamRequest) (*session, error) {
	if !s.enterStream() {
		return nil, errShuttingDown
	}
	ok := false
	defer func() {
		if !ok {
			s.streamsWG.Done()
		}
	}()
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release, err := s.streams.Acquire(ctx, req.p.thread, req.ip)
	if err != nil {
		return nil, err
	}
	sub, err := s.hub.Subscribe(req.p.thread)
	if err != nil {
		release()
		return nil, errShuttingDown
	}
	page, err := s.store.Since(ctx, req.p.thread, req.cursor, limitFor(req.cursor))
	if err != nil {
		sub.Close()
		release()
		return nil, err
	}
	ok = true
	return &session{s: s, req: req, sub: sub, backlog: page, release: release}, nil
}

// close releases what openSession took. Call it once.
func (ss *session) close() {
	ss.sub.Close()
	ss.release()
	ss.s.streamsWG.Done()
}

// maxBatch bounds how many queued events one write takes.
const maxBatch = 64

// run writes the stream until it ends: the client leaves, a write fails or
// times out, the hub drops the subscriber (slow, reset, shutdown), or the
// principal's right ends.
func (ss *session) run(fw frameWriter) {
	s := ss.s
	defer s.ops.streamOpened(fw.name())()
	p := ss.backlog
	err := fw.start(opening{
		ready:   readyFrame{Thread: p.Thread, Cursor: p.Cursor, Awaiting: p.Awaiting},
		reset:   p.Reset,
		backlog: p.Messages,
	})
	if err != nil {
		return
	}
	ss.backlog = store.Page{} // an idle stream holds no backlog
	// last is the newest epoch the client has from the backlog or its
	// cursor: live events at or below it are skipped.
	last := max(ss.req.cursor, p.Cursor)
	ping := time.NewTicker(s.cfg.Heartbeat)
	defer ping.Stop()
	batch := make([]*Event, 0, 1)
	for {
		select {
		case <-fw.gone():
			return
		case <-ss.req.p.ctx.Done():
			return
		case <-ping.C:
			if fw.heartbeat() != nil {
				return
			}
		case ev, ok := <-ss.sub.C():
			if !ok {
				why := ss.sub.Err()
				s.log.Debug("stream ended by hub", "thread", ss.req.p.thread, "transport", fw.name(), "reason", closeReason(why))
				fw.end(why)
				return
			}
			batch = batch[:0]
			for {
				if ev.Epoch > last {
					last = ev.Epoch
					batch = append(batch, ev)
				}
				if len(batch) == maxBatch || len(ss.sub.C()) == 0 {
					break
				}
				if ev, ok = <-ss.sub.C(); !ok {
					break // the drop is seen on the next turn
				}
			}
			if len(batch) == 0 {
				continue
			}
			if fw.events(batch) != nil {
				return
			}
			s.ops.delivered(fw.name(), batch...)
			clear(batch) // hold no events while idle
		}
	}
}

// readyFrame is the data of the first frame of a stream.
type readyFrame struct {
	Type     string `json:"type,omitempty"` // "ready" on the WebSocket; omitted on SSE
	Thread   string `json:"thread"`
	Cursor   int64  `json:"cursor"`
	Awaiting bool   `json:"awaiting"`
}

func (f readyFrame) marshal() []byte {
	b, _ := json.Marshal(f)
	return b
}

// streamAuth authenticates a stream by ?ticket= or X-Chat-Token. A ticket
// reads only.
func (s *Server) streamAuth(r *http.Request) (principal, error) {
	if r.URL.Query().Has("ticket") {
		if len(s.tickets.key) == 0 {
			return principal{}, chatrelay.Errorf(chatrelay.InvalidTicket, "this server issues no tickets")
		}
		thread, err := s.tickets.check(r.URL.Query().Get("ticket"))
		if err != nil {
			return principal{}, err
		}
		noteThread(r, thread)
		return principal{thread: thread, ctx: context.Background()}, nil
	}
	thread, err := threadOf(r)
	if err != nil {
		return principal{}, err
	}
	return principal{thread: thread, canPost: true, ctx: context.Background()}, nil
}

// closeReason says why the hub ended a subscription, for logs and metrics.
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
