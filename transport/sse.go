package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
)

// handleSSE serves GET /api/chat/stream: Server-Sent Events. The session
// (session.go) writes a retry hint, "ready", "reset" if retention dropped
// messages after the cursor, the backlog, then each new message, with a
// ping comment every heartbeat; the browser resumes from Last-Event-ID.
//
// Over HTTP/1 the connection is hijacked once the stream opens: the
// handler writes the response head and the opening itself and returns, so
// net/http's goroutine and buffers end. The idle stream then holds one
// shallow goroutine, blocked in a one-byte read, which notices at once a
// client that left (and so gives its stream place back at once); the
// session writes the connection directly (no buffer held while idle) from
// a goroutine that lives only while there is something to write.
// HTTP/2 streams cannot be hijacked and keep the handler's goroutine and
// net/http's writer.
func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request) {
	_, ss := s.startSession(w, r, sseCursor(r))
	if ss == nil {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store, no-transform") // the conversation: stored by no cache, as every answer of the API
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff") // the conversation, never read as a page or a script
	if r.ProtoMajor == 1 {
		if conn, head, ok := hijackSSE(w, r); ok {
			gone, left := context.WithCancel(context.Background())
			readerDone := make(chan struct{})
			go func() { // owned by the session, whose end waits for it
				defer close(readerDone)
				defer left()
				var b [1]byte
				for {
					if _, err := conn.Read(b[:]); err != nil {
						return // the client left, or the session closed the connection
					}
				}
			}()
			// Shutdown's abort fails a write blocked on a client that stopped reading.
			stopAbort := context.AfterFunc(s.abortCtx, func() { conn.SetWriteDeadline(time.Now()) })
			out := &connSSE{s: s, conn: conn, head: head, chunked: r.ProtoAtLeast(1, 1)}
			ss.run(&sseWriter{out: out}, gone, func() {
				stopAbort()
				out.last()
				conn.Close()
				<-readerDone
			})
			return
		}
	}
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // the server's WriteTimeout must not cut the stream
	stopAbort := context.AfterFunc(s.abortCtx, func() { rc.SetWriteDeadline(time.Now()) })
	w.WriteHeader(http.StatusOK)
	ss.run(&sseWriter{out: &rwSSE{s: s, w: w, rc: rc}}, r.Context(), func() { stopAbort() })
	<-ss.ended // the response is the stream: the handler returns when it ends
}

// hijackSSE takes an HTTP/1 connection over for an SSE stream and returns
// the response head to write first: 200, the headers set on w (the
// stream's and CORS's), and "Connection: close", since the body is the
// stream until the connection ends. Over HTTP/1.1 the body is chunked:
// a client that reads a close-delimited body in blocks (urllib3's
// stream(), under sseclient-py and requests) waits for a whole block, so
// a quiet thread's events never reached it; each chunk is handed on as it
// comes. ok is false if w cannot be hijacked.
func hijackSSE(w http.ResponseWriter, r *http.Request) (net.Conn, []byte, bool) {
	hdr := w.Header().Clone()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	_ = brw // a GET stream has no body to read; nothing buffered is wanted
	conn.SetDeadline(time.Time{})
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	hdr.Set("Connection", "close")
	if r.ProtoAtLeast(1, 1) {
		hdr.Set("Transfer-Encoding", "chunked")
	}
	hdr.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	hdr.Write(&b)
	b.WriteString("\r\n")
	return conn, b.Bytes(), true
}

// sseCursor is a stream's resume point: Last-Event-ID wins over ?since=.
// An empty Last-Event-ID carries no cursor and counts as absent: some
// clients send one before they have seen an event, and with it ?since=
// still resumes (the newest 50 again would repeat what the client has).
// Sent twice, either is its values joined, refused as invalid_since (see
// param). A since that is not a cursor is refused even when the header
// wins: the contract refuses every malformed since, and one passed over
// in silence hides a client's bug until its first reconnect without the
// header.
func sseCursor(r *http.Request) string {
	since := param(r, "since")
	if v := strings.Join(r.Header.Values("Last-Event-ID"), ","); v != "" {
		if _, err := parseSince(since); err != nil {
			return since
		}
		return v
	}
	return since
}

// sseWriter frames a session as Server-Sent Events on out.
type sseWriter struct {
	out sseOut
}

// sseOut is where an SSE stream's bytes go: a hijacked connection
// (connSSE) or net/http's writer (rwSSE, HTTP/2). Each write has its own
// deadline and goes out at once.
type sseOut interface {
	write(b []byte) error
}

// connSSE writes a hijacked connection directly; the response head goes
// out with the first write. Chunked (HTTP/1.1), each write is one chunk.
type connSSE struct {
	s       *Server
	conn    net.Conn
	head    []byte // not written yet
	chunked bool
}

// chunkFrames are the buffers chunked writes frame an event in: one
// write (one system call, one TLS record) a chunk, and no allocation a
// delivery, on the path every post takes to every SSE subscriber.
var chunkFrames = sync.Pool{New: func() any { return new([]byte) }}

func (c *connSSE) write(b []byte) error {
	if c.chunked && len(b) > 0 { // a chunk of size 0 would end the body
		fp := chunkFrames.Get().(*[]byte)
		defer func() {
			if cap(*fp) <= 64<<10 { // a rare large event's buffer is not kept
				chunkFrames.Put(fp)
			}
		}()
		frame := append((*fp)[:0], c.head...)
		frame = strconv.AppendInt(frame, int64(len(b)), 16)
		frame = append(frame, "\r\n"...)
		frame = append(frame, b...)
		frame = append(frame, "\r\n"...)
		*fp = frame
		b = frame
	} else if c.head != nil {
		b = append(c.head, b...)
	}
	c.head = nil
	c.conn.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	if c.s.abortCtx.Err() != nil { // checked after setting: an abort after this check sets its own deadline
		return errAborted
	}
	_, err := c.conn.Write(b)
	return err
}

// last ends a chunked body that was started with its last chunk, so that
// the client reads the stream's end as an end, not as a cut (at most a
// second: a client that stopped reading is not waited for).
func (c *connSSE) last() {
	if !c.chunked || c.head != nil || c.s.abortCtx.Err() != nil {
		return
	}
	c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	c.conn.Write([]byte("0\r\n\r\n"))
}

// rwSSE writes through net/http's ResponseWriter, flushing each write.
type rwSSE struct {
	s  *Server
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (o *rwSSE) write(b []byte) error {
	o.rc.SetWriteDeadline(time.Now().Add(o.s.cfg.WriteTimeout))
	if o.s.abortCtx.Err() != nil { // checked after setting: an abort after this check sets its own deadline
		return errAborted
	}
	if _, err := o.w.Write(b); err != nil {
		return err
	}
	return o.rc.Flush() // buffered writes fail only at Flush
}

var errAborted = errors.New("transport: shutdown cut the stream")

func (sw *sseWriter) name() string         { return transportSSE }
func (sw *sseWriter) heartbeat() error     { return sw.write([]byte(": ping\n\n")) }
func (sw *sseWriter) end(why error)        {} // SSE has no close reason: the client resumes from Last-Event-ID
func (sw *sseWriter) write(b []byte) error { return sw.out.write(b) }
func (sw *sseWriter) events(items []item) error {
	if len(items) == 1 { // the shared frame, as it is
		return sw.write(items[0].ev.SSE(items[0].k, items[0].redact))
	}
	n := 0
	for _, it := range items {
		n += len(it.ev.SSE(it.k, it.redact))
	}
	b := make([]byte, 0, n) // one write for the batch
	for _, it := range items {
		b = it.sse(b)
	}
	return sw.write(b)
}

func (sw *sseWriter) start(o opening) error {
	n := 128
	for _, it := range o.backlog {
		n += len(it.e.JSON2) + 48
	}
	b := make([]byte, 0, n)
	// The retry hint in the ready event's block: a block of its own is an
	// empty event to clients that dispatch every block (httpx-sse).
	b = append(b, "retry: 2000\nevent: ready\ndata: "...)
	b = append(b, o.ready.marshal()...)
	b = append(b, "\n\n"...)
	if o.reset {
		b = append(b, "event: reset\ndata: {}\n\n"...)
	}
	for _, it := range o.backlog {
		b = it.sse(b)
	}
	return sw.write(b)
}

// revoked tells a participant its link is no longer valid, before the
// stream ends: event: revoked, data {"code":"token_revoked"} (or
// token_expired).
func (sw *sseWriter) revoked(code chatrelay.Code) {
	sw.write([]byte(`event: revoked` + "\n" + `data: {"code":"` + string(code) + `"}` + "\n\n"))
}
