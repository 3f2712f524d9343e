package transport

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay/hub"
)

// wsReadLimit is the largest frame a client may send.
const wsReadLimit = 64 << 10

// handleWS serves GET /api/chat/ws. Frames are JSON: "ready" once the
// subscriber is registered, "reset" if retention dropped messages after the
// cursor, then each message as {"type":"message","message":{…}}. A client
// holding a token (not a ticket) may post with {"type":"post","text","kind"}
// and is answered {"type":"posted",…} or {"type":"error",…}.
//
// Goroutines: the handler's goroutine is the only writer (backlog, live
// messages, answers, pings); one reader goroutine, owned by the handler and
// waited for before it returns, reads frames and runs posts. Close codes:
// 1001 shutdown, 1008 refused credentials or cursor, 1011 internal error
// (or a thread that does not parse), 1012 resume from the store (reset),
// 1013 try again later: store unavailable, too many streams or too slow.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	opts := &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins}
	thread, canPost, authErr := s.streamAuth(r)
	var cursor int64
	if authErr == nil {
		cursor, authErr = parseSince(r.URL.Query().Get("since"))
	}
	ip := clientIP(r, s.cfg.Trusted)
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		return // Accept answered (403 for a foreign origin, 426 for a plain GET)
	}
	defer c.CloseNow()
	if !s.enterStream() {
		s.closeWith(c, errShuttingDown)
		return
	}
	defer s.streamsWG.Done()
	if authErr != nil {
		noteRefused(r, chatrelay.CodeOf(authErr))
		s.closeWith(c, authErr)
		return
	}
	c.SetReadLimit(wsReadLimit)

	// r.Context() must not be used after Accept (the connection is hijacked).
	// Shutdown's abort cancels ctx, which closes the connection and so
	// ends a write or a close handshake blocked on a client that stopped
	// reading.
	ctx, cancel := context.WithCancel(s.abortCtx)
	defer cancel()
	st, err := s.openStream(ctx, thread, ip, cursor)
	if err != nil {
		noteRefused(r, chatrelay.CodeOf(err))
		s.closeWith(c, err)
		return
	}
	defer st.close()
	defer s.ops.streamOpened(transportWS)()

	answers := make(chan []byte, 4)
	readDone := make(chan error, 1)
	go func() { readDone <- s.wsRead(ctx, c, thread, ip, canPost, answers) }()
	defer func() {
		cancel()
		c.CloseNow() // unblocks the reader
		<-readDone
	}()

	write := func(b []byte) bool {
		wctx, wcancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
		defer wcancel()
		return c.Write(wctx, websocket.MessageText, b) == nil
	}
	if !write(marshalReady("ready", st.backlog)) {
		return
	}
	if st.backlog.Reset && !write([]byte(`{"type":"reset"}`)) {
		return
	}
	var frame []byte
	for _, e := range st.backlog.Messages {
		frame = AppendWS(frame[:0], e.JSON)
		if !write(frame) {
			return
		}
	}

	ping := time.NewTicker(s.cfg.Heartbeat)
	defer ping.Stop()
	last := st.last
	for {
		select {
		case err := <-readDone:
			readDone <- err // for the deferred wait
			return
		case b := <-answers:
			if !write(b) {
				return
			}
		case <-ping.C:
			pctx, pcancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
			err := c.Ping(pctx)
			pcancel()
			if err != nil {
				return
			}
		case ev, ok := <-st.sub.C():
			if !ok {
				why := st.sub.Err()
				s.log.Debug("stream ended by hub", "thread", thread, "transport", "ws", "reason", closeReason(why))
				s.closeHub(c, why)
				return
			}
			if ev.Epoch > last {
				last = ev.Epoch
				if !write(ev.WS) {
					return
				}
				s.ops.delivered(transportWS, ev)
			}
		}
	}
}

// wsRead reads the client's frames until the connection ends, running
// posts and handing answers to the writer.
func (s *Server) wsRead(ctx context.Context, c *websocket.Conn, thread, ip string, canPost bool, answers chan<- []byte) error {
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return err
		}
		var answer []byte
		if typ != websocket.MessageText {
			answer = wsError(chatrelay.Errorf(chatrelay.InvalidJSON, "frames are JSON text"))
		} else {
			answer = s.wsFrame(ctx, data, thread, ip, canPost)
		}
		select {
		case answers <- answer:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wsFrame runs one client frame and returns the answer.
func (s *Server) wsFrame(ctx context.Context, data []byte, thread, ip string, canPost bool) []byte {
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &head) != nil {
		return wsError(chatrelay.Errorf(chatrelay.InvalidJSON, "the frame is not a JSON object"))
	}
	if head.Type != "post" {
		return wsError(chatrelay.Errorf(chatrelay.InvalidJSON, `unknown frame type; the client may send {"type":"post","text":…,"kind":…}`))
	}
	if !canPost {
		return wsError(chatrelay.Errorf(chatrelay.InvalidTicket, "a ticket is read-only; post with X-Chat-Token"))
	}
	p, err := parsePost(data)
	if err != nil {
		return wsError(err)
	}
	e, err := s.post(ctx, ip, thread, p)
	if err != nil {
		if chatrelay.CodeOf(err) == chatrelay.Internal || chatrelay.CodeOf(err) == chatrelay.StoreUnavailable {
			s.log.Error("ws post failed", "thread", thread, "err", err)
		}
		return wsError(err)
	}
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		postAnswer
	}{"posted", postAnswer{Success: true, ID: e.ID, Epoch: e.Epoch, TS: e.TS, Thread: thread}})
	return b
}

func wsError(err error) []byte {
	_, body := errorOf(err)
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		errorBody
	}{"error", body})
	return b
}

// closeWith closes a connection that could not start, with a close code
// for the error and its machine code as the reason.
func (s *Server) closeWith(c *websocket.Conn, err error) {
	code := websocket.StatusInternalError
	switch chatrelay.CodeOf(err) {
	case chatrelay.Unauthorized, chatrelay.InvalidTicket, chatrelay.InvalidSince:
		code = websocket.StatusPolicyViolation
	case chatrelay.TooManyStreams, chatrelay.StoreUnavailable:
		code = websocket.StatusTryAgainLater
	}
	if errors.Is(err, context.Canceled) {
		code = websocket.StatusGoingAway
	}
	c.Close(code, string(chatrelay.CodeOf(err)))
}

// closeHub closes a connection the hub dropped.
func (s *Server) closeHub(c *websocket.Conn, why error) {
	switch {
	case errors.Is(why, hub.ErrClosed):
		c.Close(websocket.StatusGoingAway, "server shutting down; reconnect")
	case errors.Is(why, hub.ErrSlow):
		c.Close(websocket.StatusTryAgainLater, "too slow; resume from your cursor")
	default:
		c.Close(websocket.StatusServiceRestart, "resume from your cursor")
	}
}
