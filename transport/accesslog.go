package transport

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
)

// reqInfo is what handlers tell the request log about a request: the
// thread it authenticated as and the code it was refused with. Only the
// request's own goroutine writes it.
//
// It is also the request's context, observe's one allocation for it:
// its parent's (net/http's) with itself under reqInfoKey, which is what
// context.WithValue would make, and it holds the request's recorder and
// abortable body (cutAtAbort), so that a request costs one allocation
// for all of them, not one each.
type reqInfo struct {
	context.Context // the request's context as net/http made it
	rec             recorder
	body            abortableBody

	thread      string
	code        chatrelay.Code
	participant string // the participant the request authenticated as
	// accepted, if set, runs once when the request is answered with a
	// status below 400 (a grant's use is recorded then: its first use is
	// its first accepted request, never a refused one).
	accepted func()
	// principal is the one gate let the request in as, once gated is set
	// (withPrincipal): the view of its refusals.
	principal principal
	gated     bool
	// abort is the request's hook on Shutdown's abort (cutAtAbort),
	// which also ends the context of a write that settles (settledReq).
	abort abortHook
}

type reqInfoKey struct{}

// Value is the parent's Value, and ri itself under reqInfoKey.
func (ri *reqInfo) Value(key any) any {
	if _, ok := key.(reqInfoKey); ok {
		return ri
	}
	return ri.Context.Value(key)
}

func infoOf(r *http.Request) *reqInfo {
	ri, _ := r.Context().Value(reqInfoKey{}).(*reqInfo)
	return ri
}

// noteThread records the thread a request authenticated as, for the log.
func noteThread(r *http.Request, thread string) {
	if ri := infoOf(r); ri != nil {
		ri.thread = thread
	}
}

// noteParticipant records the participant a request authenticated as: a
// refusal of its request (403, 429) is audited.
func noteParticipant(r *http.Request, thread, id string) {
	if ri := infoOf(r); ri != nil {
		ri.thread, ri.participant = thread, id
	}
}

// noteRefused records that a request was refused with code, for the log
// line and chatrelay_requests_refused_total.
func noteRefused(r *http.Request, code chatrelay.Code) {
	if ri := infoOf(r); ri != nil {
		ri.code = code
	}
}

// observe serves r through the mux, then records the request: its
// duration by route pattern and status, a refusal by code, and one log
// line. The line is at info for a refused request (with the code), at
// debug for every other one; a failure (5xx) was already logged at error
// with its cause by writeError. Never logged: the query (it may hold a
// ticket), headers (the token), bodies (message text), the client address.
func (s *Server) observe(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if s.ops.draining.Load() {
		// Draining (Drain, --drain-delay): the connection ends after this
		// answer, so that the client's next request (a proxy's kept
		// upstream connection) goes on a new one, never on a kept one
		// that the listener's close would cut while the request is on its
		// way. A WebSocket's upgrade sets its own (Connection: Upgrade);
		// over HTTP/2, net/http sends a GOAWAY for it.
		w.Header().Set("Connection", "close")
	}
	ri := &reqInfo{Context: r.Context()}
	r = r.WithContext(ri)
	rec := &ri.rec
	rec.ResponseWriter, rec.info = w, ri
	var rw http.ResponseWriter = rec
	if _, ok := w.(http.Hijacker); ok { // HTTP/1; an HTTP/2 stream cannot be hijacked
		rw = hijackRecorder{rec}
	}
	s.mux.ServeHTTP(rw, r) // sets r.Pattern
	end := time.Now()

	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	route := s.routeOf(r.Pattern)
	took := end.Sub(start)
	if (rec.stream || rec.hijacked) && !rec.headerAt.IsZero() {
		took = rec.headerAt.Sub(start) // a stream: the time to open it
	}
	s.ops.requestDone(route, status, took)
	if ri.code != "" {
		s.ops.refused.WithLabelValues(string(ri.code)).Inc()
		// A participant's refusal is audited; a device's is not (the
		// contract's device events are issued, revoked, expired, first use),
		// nor one for a grant the thread no longer has (401 unauthorized: gone
		// with its thread, which a post with the owner's token may have made
		// again since, whose audit must not name it).
		if chatrelay.ValidParticipantID(ri.participant) && auditedRefusal(ri.code, status) {
			s.audit(r, ri.thread, chatrelay.AuditEvent{Event: chatrelay.AuditRefused, Participant: ri.participant, Code: ri.code})
		}
	}
	level := slog.LevelDebug
	if ri.code != "" && status < 500 {
		level = slog.LevelInfo
	} else if ri.code != "" {
		return // writeError logged the failure with its cause
	}
	if !s.log.Enabled(r.Context(), level) {
		return // most requests at the default level: build no log line
	}
	attrs := []slog.Attr{
		slog.String("method", clip(r.Method)), slog.String("route", route), slog.String("path", logPath(r.URL.Path)),
		slog.Int("status", status), slog.Duration("dur", end.Sub(start)),
	}
	if ri.thread != "" {
		attrs = append(attrs, slog.String("thread", ri.thread))
	}
	if ri.code != "" {
		attrs = append(attrs, slog.String("code", string(ri.code)))
		s.log.LogAttrs(r.Context(), level, "request refused", attrs...)
		return
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}

// routeOf is the route label of a mux pattern: the pattern without the
// prefix, so dashboards work whatever the mount point. A request that
// matched no pattern is "unmatched".
func (s *Server) routeOf(pattern string) string {
	if pattern == "" {
		return "unmatched"
	}
	if s.cfg.Prefix != "" {
		if rest, ok := strings.CutPrefix(pattern, s.cfg.Prefix); ok && strings.HasPrefix(rest, "/") {
			return rest
		}
	}
	return pattern
}

// recorder notes the status of a response and when its headers went out.
// It passes Flush and (through Unwrap) write deadlines on, so streams work
// through it; hijackRecorder adds Hijack, for WebSockets over HTTP/1.
type recorder struct {
	http.ResponseWriter
	status   int
	headerAt time.Time
	stream   bool // an SSE response
	hijacked bool // a WebSocket
	info     *reqInfo
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *recorder) sent(status int) {
	if w.status == 0 {
		w.status = status
		w.headerAt = time.Now()
		w.stream = strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream")
		if f := w.info.accepted; f != nil && status < 400 {
			w.info.accepted = nil
			f()
		}
	}
}

func (w *recorder) WriteHeader(status int) {
	if status >= 200 || status == http.StatusSwitchingProtocols {
		w.sent(status)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recorder) Write(b []byte) (int, error) {
	w.sent(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

func (w *recorder) FlushError() error {
	w.sent(http.StatusOK)
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *recorder) Flush() { w.FlushError() }

type hijackRecorder struct{ *recorder }

func (w hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
		status := http.StatusSwitchingProtocols // a WebSocket
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			status = http.StatusOK // an SSE stream, whose head the handler writes
		}
		w.sent(status)
	}
	return c, brw, err
}

// maxLogValue bounds each value a client chose (a path, a method) in a log
// line, so that a 1 MB path does not make a 1 MB line.
const maxLogValue = 256

// clip cuts s to at most maxLogValue bytes, on a UTF-8 boundary, marking
// the cut with "…".
func clip(s string) string { return clipTo(s, maxLogValue) }

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// logPath is a request's path as its log line holds it: clipped, with
// every secret shape redacted (chatrelay.Redact: a token, a share or device
// token, an agent key, password=…), since a client chooses it and may put
// a credential in it (an address built from the wrong variable, a link
// pasted into a path). The path is cut before it is redacted, to bound the
// work, well past where the line cuts it.
func logPath(p string) string {
	return clip(chatrelay.Redact(clipTo(p, 4*maxLogValue)))
}

// auditedRefusal reports whether a grant's request refused with code and
// status is the audit's "refused" event (contract Part 3: 401
// token_revoked or token_expired, 403, 429), over HTTP as in a
// WebSocket's post frame. 401 unauthorized (a grant the thread no longer
// has) and invalid_ticket (a ticket never posts) are not.
func auditedRefusal(code chatrelay.Code, status int) bool {
	return status == http.StatusForbidden || status == http.StatusTooManyRequests ||
		code == chatrelay.TokenRevoked || code == chatrelay.TokenExpired
}
