package transport

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/chatrelay/chatrelay"
)

// handleSSE serves GET /api/chat/stream: Server-Sent Events. The session
// (session.go) writes a retry hint, "ready", "reset" if retention dropped
// messages after the cursor, the backlog, then each new message, with a
// ping comment every heartbeat; the browser resumes from Last-Event-ID.
func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request) {
	req, err := s.streamRequest(r, sseCursor(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ss, err := s.openSession(r.Context(), req)
	if err != nil {
		if r.Context().Err() == nil {
			s.writeError(w, r, err)
		}
		return
	}
	defer ss.close()
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // the server's WriteTimeout must not cut the stream
	// Shutdown's abort fails a write blocked on a client that stopped reading.
	defer context.AfterFunc(s.abortCtx, func() { rc.SetWriteDeadline(time.Now()) })()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ss.run(&sseWriter{s: s, w: w, rc: rc, done: r.Context().Done()})
}

// sseCursor is a stream's resume point: Last-Event-ID (even empty) wins
// over ?since=.
func sseCursor(r *http.Request) string {
	if v, ok := r.Header["Last-Event-Id"]; ok {
		if len(v) == 0 {
			return ""
		}
		return v[0]
	}
	return r.URL.Query().Get("since")
}

// sseWriter frames a session as Server-Sent Events. Each write has its
// own deadline and is flushed at once.
type sseWriter struct {
	s    *Server
	w    http.ResponseWriter
	rc   *http.ResponseController
	done <-chan struct{}
}

var errAborted = errors.New("transport: shutdown cut the stream")

func (sw *sseWriter) name() string          { return transportSSE }
func (sw *sseWriter) gone() <-chan struct{} { return sw.done }
func (sw *sseWriter) heartbeat() error      { return sw.write([]byte(": ping\n\n")) }
func (sw *sseWriter) end(why error)         {} // SSE has no close reason: the client resumes from Last-Event-ID
func (sw *sseWriter) events(items []item) error {
	if len(items) == 1 { // the shared frame, as it is
		return sw.write(items[0].ev.SSE(items[0].k, items[0].redact))
	}
	n := 0
	for _, it := range items {
		n += len(it.ev.SSE(it.k, it.redact))
	}
	b := make([]byte, 0, n) // one write and one flush for the batch
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
	b = append(b, "retry: 2000\n\nevent: ready\ndata: "...)
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

func (sw *sseWriter) write(b []byte) error {
	sw.rc.SetWriteDeadline(time.Now().Add(sw.s.cfg.WriteTimeout))
	if sw.s.abortCtx.Err() != nil { // checked after setting: an abort after this check sets its own deadline
		return errAborted
	}
	if _, err := sw.w.Write(b); err != nil {
		return err
	}
	return sw.rc.Flush() // buffered writes fail only at Flush
}

// revoked tells a participant its link is no longer valid, before the
// stream ends: event: revoked, data {"code":"token_revoked"} (or
// token_expired).
func (sw *sseWriter) revoked(code chatrelay.Code) {
	sw.write([]byte(`event: revoked` + "\n" + `data: {"code":"` + string(code) + `"}` + "\n\n"))
}
