package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/r3labs/sse/v2"

	"github.com/chatrelay/chatrelay"
)

// message is a stored message as the server sends it: the data of an SSE
// message event, inside a WebSocket message frame, the answer of a post.
type message struct {
	ID        string              `json:"id"`
	Epoch     int64               `json:"epoch"`
	Rev       int64               `json:"rev"` // v2
	Text      string              `json:"text"`
	Reactions map[string][]string `json:"reactions"` // v2
}

// frame is a WebSocket frame, or (Cursor only) an SSE ready event's data.
type frame struct {
	Type    string  `json:"type"`
	Cursor  int64   `json:"cursor"`
	Message message `json:"message"`
}

// handler receives a subscriber's frames. Its methods run on the
// subscriber's goroutine and must not block.
type handler interface {
	ready(s *subscriber, cursor int64)
	message(s *subscriber, epoch int64, text string)
}

// updater is a handler of v2 streams, which also receive updates: a
// change of a message the stream sent before (a reaction, here).
type updater interface {
	update(s *subscriber, m *message)
}

// subscriber is one live stream (SSE or WebSocket) of one thread, read by
// one goroutine. It resumes from the newest complete message it received
// (its own cursor, never the SSE client's LastEventID): Last-Event-ID on SSE,
// ?since= on the WebSocket.
type subscriber struct {
	idx    int
	thread *thread
	ws     bool
	v2     bool // the v2 view (?v=2): messages and updates, the cursor is the change's rev

	cursor  atomic.Int64 // newest epoch received; stored only by the reading goroutine
	epochs  []int64      // S5: every epoch received, in order
	readies atomic.Int32 // ready frames received
	resets  atomic.Int32 // reset frames received
	ended   atomic.Int32 // sessions that ended, for any reason
	lastErr atomic.Pointer[string]

	mu     sync.Mutex // guards closer and done
	closer io.Closer
	done   bool // close was called: do not reconnect

	partial atomic.Int32 // SSE message events dropped as incomplete (cut by a closed connection)
	buf     []byte       // a WebSocket frame being assembled
}

func (s *subscriber) setCloser(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		c.Close()
		return false
	}
	s.closer = c
	return true
}

// drop closes the current connection; the reading goroutine then resumes
// (if its run loop allows) from its cursor.
func (s *subscriber) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closer != nil {
		s.closer.Close()
		s.closer = nil
	}
}

// close ends the subscriber for good.
func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if s.closer != nil {
		s.closer.Close()
		s.closer = nil
	}
}

func (s *subscriber) closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

func (s *subscriber) fail(err error) {
	msg := err.Error()
	s.lastErr.Store(&msg)
}

// run reads sessions until close, ctx's end or, unless resume, the first
// session's end. A failed connect is retried (with a growing pause) at most
// maxTries times in a row.
func (s *subscriber) run(ctx context.Context, t *target, h handler, resume bool) {
	const maxTries = 40
	tries := 0
	for ctx.Err() == nil && !s.closed() {
		got := s.readies.Load()
		err := s.session(ctx, t, h)
		if err != nil && !s.closed() {
			s.fail(err)
		}
		s.ended.Add(1)
		if !resume {
			return
		}
		if s.readies.Load() > got {
			tries = 0
			continue
		}
		tries++
		if tries >= maxTries {
			return
		}
		pause := time.Duration(tries) * 25 * time.Millisecond
		if statusOf(err) == http.StatusTooManyRequests {
			pause = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (s *subscriber) session(ctx context.Context, t *target, h handler) error {
	if t.peer != nil {
		return t.peer.session(ctx, t, s, h)
	}
	if s.ws {
		return s.wsSession(ctx, t, h)
	}
	return s.sseSession(ctx, t, h)
}

// errStreamEnded is a session that the server ended cleanly (the r3labs
// client returns nil on a clean EOF and does not reconnect by itself).
var errStreamEnded = errors.New("stream ended by the server")

// sseSession reads one SSE connection with the r3labs/sse client, set as
// libraries.md §1.6 says: 1 MiB events, no reconnect of its own (the run
// loop reconnects, from the tool's cursor), an empty stream name, the
// token as a header, bounded by a context that drop and close cancel.
func (s *subscriber) sseSession(ctx context.Context, t *target, h handler) error {
	u := t.base + chatrelay.PathSSE
	if s.v2 {
		u += "?v=2"
	}
	return sseStream(ctx, t, s, u, func(c *sse.Client) {
		c.Headers["X-Chat-Token"] = s.thread.token
		// Resume from the newest complete message this tool recorded. The
		// client's own LastEventID may come from an event cut off by a dropped
		// connection, so it is overwritten on every session.
		var last []byte
		if cur := s.cursor.Load(); cur > 0 {
			last = strconv.AppendInt(nil, cur, 10)
		}
		c.LastEventID.Store(last)
	}, func(ev *sse.Event) { s.sseEvent(h, ev) })
}

// sseEvent handles one event from the client. A connection closed in the
// middle of an event hands the client the event's first part as if it were
// whole (its id possibly cut short too): a message counts only when its data
// is complete JSON and its id is the epoch inside.
func (s *subscriber) sseEvent(h handler, ev *sse.Event) {
	switch string(ev.Event) {
	case "ready":
		var f frame
		if json.Unmarshal(ev.Data, &f) != nil {
			return
		}
		s.readies.Add(1)
		h.ready(s, f.Cursor)
	case "reset":
		s.resets.Add(1)
	case "message", "", "update":
		if len(ev.Data) == 0 {
			return // retry:, or an event cut before its data
		}
		var m message
		if json.Unmarshal(ev.Data, &m) != nil || m.Epoch <= 0 || string(ev.ID) != strconv.FormatInt(s.cursorOf(&m), 10) {
			s.partial.Add(1)
			return
		}
		if string(ev.Event) == "update" {
			s.deliverUpdate(h, &m)
			return
		}
		s.deliverMessage(h, &m)
	}
}

// cursorOf is the stream's cursor once it has m: its epoch (v1), its rev (v2).
func (s *subscriber) cursorOf(m *message) int64 {
	if s.v2 {
		return m.Rev
	}
	return m.Epoch
}

// deliverMessage records a complete message and hands it to h.
func (s *subscriber) deliverMessage(h handler, m *message) {
	if c := s.cursorOf(m); c > s.cursor.Load() {
		s.cursor.Store(c)
	}
	h.message(s, m.Epoch, m.Text)
}

// deliverUpdate records a complete update and hands it to h, if h takes
// updates.
func (s *subscriber) deliverUpdate(h handler, m *message) {
	if m.Rev > s.cursor.Load() {
		s.cursor.Store(m.Rev)
	}
	if u, ok := h.(updater); ok {
		u.update(s, m)
	}
}

func (s *subscriber) wsSession(ctx context.Context, t *target, h handler) error {
	u := "ws://" + t.host + t.prefix + chatrelay.PathWS
	q := []string{}
	if s.v2 {
		q = append(q, "v=2")
	}
	if cur := s.cursor.Load(); cur > 0 {
		q = append(q, "since="+strconv.FormatInt(cur, 10))
	}
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	c, err := wsDial(ctx, t, s, u, http.Header{"X-Chat-Token": {s.thread.token}})
	if c == nil {
		return err
	}
	defer c.CloseNow()
	bg := context.Background() // no per-read timer: the connection is closed to stop
	for {
		_, r, err := c.Reader(bg)
		if err != nil {
			return err
		}
		s.buf = s.buf[:0]
		for {
			if len(s.buf) == cap(s.buf) {
				s.buf = append(s.buf, 0)[:len(s.buf)]
			}
			n, err := r.Read(s.buf[len(s.buf):cap(s.buf)])
			s.buf = s.buf[:len(s.buf)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		var f frame
		if err := json.Unmarshal(s.buf, &f); err != nil {
			return fmt.Errorf("WebSocket frame: %w", err)
		}
		switch f.Type {
		case "message":
			s.deliverMessage(h, &f.Message)
		case "update":
			s.deliverUpdate(h, &f.Message)
		case "ready":
			s.readies.Add(1)
			h.ready(s, f.Cursor)
		case "reset":
			s.resets.Add(1)
		}
	}
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
