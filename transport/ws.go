package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/hub"
)

// wsReadLimit is the largest frame a client may send: one larger closes
// the socket (1009). A frame over chatrelay.MaxBody (a post's body limit,
// as over HTTP) is answered body_too_large, the socket kept (wsFrame).
const wsReadLimit = 64 << 10

// handleWS serves GET /api/chat/ws. Every refusal (a foreign origin, not a
// WebSocket handshake, a bad token, ticket or cursor, too many streams) is
// answered before the upgrade, as the contract's JSON error with its
// status. Then the session (session.go) writes "ready", "reset" if
// retention dropped messages after the cursor, and each message as
// {"type":"message","message":{…}}. A client holding the token may post
// with {"type":"post","text","kind"}; it is answered {"type":"posted",…}
// or {"type":"error",…}.
//
// Goroutines: the session's turns write the stream frames (session.go);
// one reader, owned by the session and waited for when it ends, reads the
// client's frames, runs posts and writes their answers (the connection's
// writes are safe for concurrent use). Close codes once
// upgraded: 1001 shutdown, 1008 a participant's link revoked or expired
// (the reason is the code), 1012 resume from the store (reset), 1013 too
// slow. Everything else (the store down included) is refused before the
// upgrade with its HTTP status.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if err := s.checkHandshake(w, r); err != nil {
		s.writeError(w, r, err)
		return
	}
	req, ss := s.startSession(w, r, param(r, "since"))
	if ss == nil {
		return
	}
	// The origin was checked above, by the one matcher CORS uses too.
	sb := &smallBufs{ResponseWriter: w}
	c, err := websocket.Accept(sb, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		ss.close()
		return // the handshake was checked: only a failed hijack gets here
	}
	c.SetReadLimit(wsReadLimit)
	// The connection is hijacked: the handler writes the opening and
	// returns, so net/http's goroutine (with its deep stack) ends. The idle
	// stream holds one goroutine, the reader; the session writes from a
	// goroutine that lives only while there is something to write.
	// r.Context() must not be used from here on. Shutdown's abort cancels
	// ctx, which closes the connection and so ends a write blocked on a
	// client that stopped reading.
	ctx, cancel := context.WithCancel(s.abortCtx)
	// Only the connection is kept: sb holds net/http's response, and with
	// it the 4 KiB buffers it had for the connection (an idle stream held
	// them, 7 KiB more, while the abort's func held sb).
	conn := sb.conn
	ww := &wsWriter{s: s, c: c, conn: conn, ctx: ctx, opened: make(chan struct{})}
	stopAbort := context.AfterFunc(ctx, func() { conn.SetWriteDeadline(time.Now()) })
	gone, left := context.WithCancel(context.Background())
	readerDone := make(chan struct{})
	go func() { // owned by the session, whose end waits for it
		defer close(readerDone)
		defer left()
		s.wsRead(ctx, ww, req)
	}()
	ss.run(ww, gone, func() {
		stopAbort()
		cancel()
		c.CloseNow() // unblocks the reader
		<-readerDone
	})
}

// The buffers a WebSocket connection reads and writes through, for its
// whole life. net/http hands a hijacker 4 KiB of each; a stream's frames
// are a few hundred bytes, and a larger one is read or written through
// (bufio copies nothing it need not), so small ones cost an idle stream
// less without costing a write more.
const (
	wsReadBuf  = 512
	wsWriteBuf = 2048
)

// smallBufs is a ResponseWriter whose Hijack (which websocket.Accept
// calls) hands over small buffers instead of net/http's, and keeps the
// connection (conn) for the frames' write deadlines.
type smallBufs struct {
	http.ResponseWriter
	conn net.Conn
}

func (w *smallBufs) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *smallBufs) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil { // the 101 head went out already; nothing should be left
		conn.Close()
		return nil, nil, err
	}
	// What the client sent after its handshake must be in the reader's
	// buffer, not behind it: Accept takes the buffered bytes and points
	// the reader at the connection.
	n := brw.Reader.Buffered()
	br := bufio.NewReaderSize(conn, max(wsReadBuf, n))
	if n > 0 {
		b, _ := brw.Reader.Peek(n)
		br.Reset(io.MultiReader(bytes.NewReader(bytes.Clone(b)), conn))
		if _, err := br.Peek(n); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	w.conn = conn
	return conn, bufio.NewReadWriter(br, bufio.NewWriterSize(conn, wsWriteBuf)), nil
}

// checkHandshake refuses, before any upgrade, a request that is not a
// WebSocket handshake this server takes: a foreign Origin (403
// origin_not_allowed), no upgrade or an HTTP/1.0 one (426
// upgrade_required), a version other than 13 (426), or a malformed or
// repeated key (400 invalid_handshake). It checks all that Accept
// checks, so that Accept, which answers in plain text, refuses nothing.
func (s *Server) checkHandshake(w http.ResponseWriter, r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o, r.Host) {
		return chatrelay.Errorf(chatrelay.OriginNotAllowed, "this origin may not open a WebSocket here; the server lists the origins it allows with --allowed-origin")
	}
	if r.ProtoMajor >= 2 {
		// No Upgrade header: HTTP/2 forbids it (RFC 9113, 8.2.2), and
		// curl and browsers reset a stream whose answer carries one, so
		// the client would never read the 426.
		return chatrelay.Errorf(chatrelay.UpgradeRequired, "this route is a WebSocket: open it over HTTP/1.1 with a WebSocket handshake (this connection is HTTP/2)")
	}
	if !r.ProtoAtLeast(1, 1) || !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("Connection", "Upgrade")
		return chatrelay.Errorf(chatrelay.UpgradeRequired, "this route is a WebSocket: send a WebSocket handshake (Connection: Upgrade, Upgrade: websocket)")
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		return chatrelay.Errorf(chatrelay.UpgradeRequired, "unsupported WebSocket version: only 13 is spoken")
	}
	// One key, as the library's Accept wants: a second would get its
	// plain-text 400 after the stream was counted.
	keys := r.Header.Values("Sec-WebSocket-Key")
	if k, err := base64.StdEncoding.DecodeString(r.Header.Get("Sec-WebSocket-Key")); err != nil || len(k) != 16 || len(keys) != 1 {
		return chatrelay.Errorf(chatrelay.InvalidHandshake, "send one Sec-WebSocket-Key, of 16 bytes in base64")
	}
	return nil
}

// headerHas reports whether a comma-separated header holds token, in any case.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsWriter frames a session as WebSocket text frames, each write bounded
// by the server's write timeout.
type wsWriter struct {
	s      *Server
	c      *websocket.Conn
	conn   net.Conn        // c's connection
	ctx    context.Context // cancelled by Shutdown's abort and when the stream ends
	mu     sync.Mutex      // held by a write, with its deadline: the session's frames and the reader's answers
	opened chan struct{}   // closed once start returns: the reader answers only then
	// frame is held by the reader from a frame's post to its answer, and
	// by a close before it begins (stopFrames): a post the store took is
	// answered before the close frame, and none is run after it.
	frame   sync.Mutex
	closing bool // guarded by frame: the reader runs no more frames
}

func (ww *wsWriter) name() string { return transportWS }

// write writes b as one text frame, bounded by a write deadline on the
// connection, which it clears after (the library's own writes, a pong or
// a close, take none). A deadline rather than a context with a timeout:
// the library registers a context's end per write, which cost a frame
// about eight allocations and two timers. Shutdown's abort sets a deadline
// in the past (handleWS) and cancels ctx, checked after the deadline is
// set, as connSSE.write does.
func (ww *wsWriter) write(b []byte) error {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	ww.conn.SetWriteDeadline(time.Now().Add(ww.s.cfg.WriteTimeout))
	if ww.ctx.Err() != nil {
		return errAborted
	}
	err := ww.c.Write(context.Background(), websocket.MessageText, b)
	ww.conn.SetWriteDeadline(time.Time{})
	return err
}

func (ww *wsWriter) start(o opening) error {
	defer close(ww.opened)
	o.ready.Type = "ready"
	if err := ww.write(o.ready.marshal()); err != nil {
		return err
	}
	if o.reset {
		if err := ww.write([]byte(`{"type":"reset"}`)); err != nil {
			return err
		}
	}
	var buf []byte // backlog items are never shared events: buf is ours to reuse
	for _, it := range o.backlog {
		buf = it.ws(buf)
		if err := ww.write(buf); err != nil {
			return err
		}
	}
	return nil
}

func (ww *wsWriter) events(items []item) error {
	for _, it := range items {
		if err := ww.write(it.ws(nil)); err != nil {
			return err
		}
	}
	return nil
}

// heartbeat pings and waits for the pong, which the reader delivers. A
// pong that does not come within the write timeout ends the stream as a
// slow one, with 1013 (a close frame the client can read when it reads
// but does not answer pings), not with no close frame at all. A ping
// whose write failed has closed the connection already; Shutdown's abort
// is left to the shutdown's own close.
func (ww *wsWriter) heartbeat() error {
	ctx, cancel := context.WithTimeout(ww.ctx, ww.s.cfg.WriteTimeout)
	defer cancel()
	err := ww.c.Ping(ctx)
	if err != nil && ww.ctx.Err() == nil {
		ww.end(hub.ErrSlow)
	}
	return err
}

// stopFrames waits for the frame the reader is running, if any, to be
// answered, and stops the reader from running another: called before a
// close, after which no answer can be written.
func (ww *wsWriter) stopFrames() {
	ww.frame.Lock()
	ww.closing = true
	ww.frame.Unlock()
}

// end closes a connection the hub dropped, with a code that tells the
// client how to come back.
func (ww *wsWriter) end(why error) {
	ww.stopFrames()
	switch {
	case errors.Is(why, hub.ErrClosed):
		ww.c.Close(websocket.StatusGoingAway, "server shutting down; reconnect")
	case errors.Is(why, hub.ErrSlow):
		ww.c.Close(websocket.StatusTryAgainLater, "too slow; resume from your cursor")
	default:
		ww.c.Close(websocket.StatusServiceRestart, "resume from your cursor")
	}
}

// revoked closes a participant's connection with 1008 and the machine
// code (token_revoked or token_expired) as the reason.
func (ww *wsWriter) revoked(code chatrelay.Code) {
	ww.stopFrames()
	ww.c.Close(websocket.StatusPolicyViolation, string(code))
}

// wsRead reads the client's frames until the connection ends, running
// posts and writing their answers.
func (s *Server) wsRead(ctx context.Context, ww *wsWriter, req streamRequest) {
	// ready is the stream's first frame, even when the client posts in the
	// packet of its handshake or at once on open: frames are read (and
	// answered) only once the opening is written.
	select {
	case <-ww.opened:
	case <-ctx.Done():
		return
	}
	for {
		typ, data, err := ww.c.Read(ctx)
		if err != nil {
			return
		}
		ww.frame.Lock()
		if ww.closing {
			ww.frame.Unlock()
			return // read as the stream closes: not run, so not stored
		}
		var answer []byte
		if typ != websocket.MessageText {
			answer = wsError(chatrelay.Errorf(chatrelay.InvalidJSON, "frames are JSON text"), req.p.view(view{v2: true}))
		} else {
			answer = s.wsFrame(ctx, data, req)
		}
		err = ww.write(answer)
		ww.frame.Unlock()
		if err != nil {
			return
		}
	}
}

// wsFrame runs one client frame and returns the answer.
func (s *Server) wsFrame(ctx context.Context, data []byte, req streamRequest) []byte {
	v := req.p.view(view{v2: true})    // the view of a refusal's message
	if len(data) > chatrelay.MaxBody { // post.body: the limit of a post's body, over HTTP too
		return wsError(chatrelay.Errorf(chatrelay.BodyTooLarge, "frame over %d bytes, the limit of a post's body", chatrelay.MaxBody), v)
	}
	// The frame's members by their exact names ("TYPE" is not type, as
	// the bundle reads it); null is no object.
	var members map[string]json.RawMessage
	var typ string
	if json.Unmarshal(data, &members) != nil || members == nil {
		return wsError(chatrelay.Errorf(chatrelay.InvalidJSON, "the frame is not a JSON object"), v)
	}
	if members["type"] != nil && json.Unmarshal(members["type"], &typ) != nil { // an object, with a wrong field
		return wsError(chatrelay.Errorf(chatrelay.InvalidJSON, `the frame's fields have the wrong types: type must be a string ("post")`), v)
	}
	if typ != "post" {
		return wsError(chatrelay.Errorf(chatrelay.InvalidJSON, `unknown frame type; the client may send {"type":"post","text":…,"kind":…}`), v)
	}
	if err := writers.allows(req.p); err != nil {
		return s.wsRefused(req, err, v)
	}
	p, err := parsePost(data, req.p)
	if err != nil {
		return wsError(err, v)
	}
	thread := req.p.thread
	// A frame read whole is stored or refused whatever the socket does
	// meanwhile, as an HTTP post is (settles): a post cut short by the
	// socket's end might have run all the same.
	pctx, stop := s.settled(ctx)
	defer stop()
	e, err := s.post(pctx, req.ip, req.p, p)
	if err != nil {
		if c := chatrelay.CodeOf(err); c == chatrelay.Internal || c == chatrelay.StoreUnavailable {
			s.log.Error("ws post failed", "thread", thread, "err", err)
		}
		return s.wsRefused(req, err, v)
	}
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		postAnswer
		Replayed bool `json:"replayed,omitempty"` // the client_id named a message already stored
	}{"posted", postAnswer{Success: true, ID: e.ID, Epoch: e.Epoch, TS: e.TS, Thread: thread}, e.Replayed})
	return b
}

// wsRefused is the error frame of a post frame's refusal err, which it
// audits as a participant's refused request when the access log would
// (auditedRefusal), before the frame is written: a post frame is the
// participant's request, as its POST /api/chat/post is.
func (s *Server) wsRefused(req streamRequest, err error, v view) []byte {
	if code := chatrelay.CodeOf(err); req.p.grant != nil && auditedRefusal(code, statusOf[code]) {
		if e, ok := req.p.grant.AuditOf(chatrelay.AuditRefused); ok { // a device's is not audited
			e.Code, e.IP = code, req.addr
			s.audit(nil, req.p.thread, e)
		}
	}
	return wsError(err, v)
}

// wsError is the error frame of err in view v (the message a refusal is
// about is shown as v shows it).
func wsError(err error, v view) []byte {
	_, body := errorOf(err, v)
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		errorBody
	}{"error", body})
	return b
}

// isObject reports whether valid JSON data is an object (its first byte
// past white space is '{').
func isObject(data []byte) bool {
	i := 0
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i < len(data) && data[i] == '{'
}
