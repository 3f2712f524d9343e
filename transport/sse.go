package transport

import (
	"context"
	"net/http"
	"time"
)

// handleSSE serves GET /api/chat/stream: a retry hint, then "ready" once
// the subscriber is registered, "reset" if retention dropped messages after
// the cursor, the backlog, then each new message as it is stored, with a
// ping comment every heartbeat. The stream ends when the client leaves, a
// write fails or times out, or the hub drops the subscriber (slow, reset,
// shutdown); the browser then resumes from Last-Event-ID.
func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request) {
	thread, _, err := s.streamAuth(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	lei, hasLEI := r.Header["Last-Event-Id"]
	leiValue := ""
	if hasLEI && len(lei) > 0 {
		leiValue = lei[0]
	}
	cursor, err := cursorOf(leiValue, hasLEI, r.URL.Query().Get("since"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !s.enterStream() {
		s.writeError(w, r, errShuttingDown)
		return
	}
	defer s.streamsWG.Done()
	st, err := s.openStream(r.Context(), thread, clientIP(r, s.cfg.Trusted), cursor)
	if err != nil {
		if r.Context().Err() == nil {
			s.writeError(w, r, err)
		}
		return
	}
	defer st.close()
	defer s.ops.streamOpened(transportSSE)()

	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // the server's WriteTimeout must not cut the stream
	// Shutdown's abort fails a write blocked on a client that stopped reading.
	defer context.AfterFunc(s.abortCtx, func() { rc.SetWriteDeadline(time.Now()) })()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	buf := make([]byte, 0, 512)
	buf = append(buf, "retry: 2000\n\nevent: ready\ndata: "...)
	buf = append(buf, marshalReady("", st.backlog)...)
	buf = append(buf, "\n\n"...)
	if st.backlog.Reset {
		buf = append(buf, "event: reset\ndata: {}\n\n"...)
	}
	for _, e := range st.backlog.Messages {
		buf = AppendSSE(buf, e.Epoch, e.JSON)
	}
	write := func(b []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if s.abortCtx.Err() != nil { // checked after setting: an abort after this check sets its own deadline
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil // buffered writes fail only at Flush
	}
	if !write(buf) {
		return
	}
	buf = nil // not held by an idle stream

	ping := time.NewTicker(s.cfg.Heartbeat)
	defer ping.Stop()
	last := st.last
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			if !write([]byte(": ping\n\n")) {
				return
			}
		case ev, ok := <-st.sub.C():
			if !ok {
				s.log.Debug("stream ended by hub", "thread", thread, "transport", "sse", "reason", closeReason(st.sub.Err()))
				return
			}
			if ev.Epoch <= last {
				continue
			}
			last = ev.Epoch
			if len(st.sub.C()) == 0 {
				if !write(ev.SSE) {
					return
				}
				s.ops.delivered(transportSSE, ev)
				continue
			}
			// Several queued: one write and one flush for all of them.
			out := append([]byte(nil), ev.SSE...)
			evs := []*Event{ev}
			for len(st.sub.C()) > 0 {
				ev, ok := <-st.sub.C()
				if !ok {
					break
				}
				if ev.Epoch > last {
					last = ev.Epoch
					out = append(out, ev.SSE...)
					evs = append(evs, ev)
				}
			}
			if !write(out) {
				return
			}
			s.ops.delivered(transportSSE, evs...)
		}
	}
}
