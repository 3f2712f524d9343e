package transport

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
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

// view is what a stream or a poll shows its principal: the frozen v1 view
// (new messages, v1 objects, the message cursor) or the v2 view (every
// change, v2 objects, the change cursor). The frames of each view are
// encoded once per change and shared by its subscribers (Event).
type view struct {
	v2     bool
	redact bool // a participant's view: secret-shaped text is [redacted]
}

// entry is e as the view shows it.
func (v view) entry(e store.Entry) store.Entry {
	if v.redact {
		r, _ := redactEntry(e)
		return r
	}
	return e
}

// json is the message object of e in the view.
func (v view) json(e store.Entry) []byte {
	e = v.entry(e)
	if v.v2 {
		return e.JSON2
	}
	return e.JSON
}

// viewOf reads the view a request asks for: ?v= absent, empty or 1 is v1,
// 2 is v2, anything else is refused with invalid_version.
func viewOf(r *http.Request) (view, error) {
	switch param(r, "v") {
	case "", "1":
		return view{}, nil
	case "2":
		return view{v2: true}, nil
	}
	return view{}, chatrelay.Errorf(chatrelay.InvalidVersion, `v is 1 (the default) or 2`)
}

// read is the view's read of a thread after cursor: the v1 messages
// (Since) or the v2 changes (Changes).
func (v view) read(ctx context.Context, st store.Store, thread string, cursor int64) (store.Page, error) {
	if v.v2 {
		return st.Changes(ctx, thread, cursor, limitFor(cursor))
	}
	return st.Since(ctx, thread, cursor, limitFor(cursor))
}

// kindOf says how a stream of the view at cursor sends message e, and
// whether it sends it at all: v1 sends a message once, when its epoch is
// past the cursor; v2 sends each change past the cursor, as a message if
// the client cannot have it yet (its epoch is past the cursor), else as an
// update.
func (v view) kindOf(e store.Entry, cursor int64) (kind, bool) {
	if !v.v2 {
		return v1Message, e.Epoch > cursor
	}
	if e.Epoch > cursor {
		return v2Message, true
	}
	return v2Update, e.Rev > cursor
}

// cursorAfter is the cursor of a stream of the view once it sent e.
func (v view) cursorAfter(e store.Entry) int64 {
	if v.v2 {
		return e.Rev
	}
	return e.Epoch
}

// streamRequest is a stream asked for: by whom, what view, from where.
type streamRequest struct {
	p      principal
	v      view
	cursor int64
	ip     string // the client's address as the rate windows count it (limitKey)
	addr   string // the client's address, for the audit of a participant's refused post frames
}

// frameWriter writes one stream's frames in its transport's framing. The
// session calls it from one goroutine at a time.
type frameWriter interface {
	// start writes the opening: ready, reset if the reader missed
	// messages it can no longer get, then the backlog, in order.
	start(o opening) error
	// events writes live changes of the thread, in order.
	events(items []item) error
	// heartbeat keeps an idle stream open through proxies and finds a
	// client that left.
	heartbeat() error
	// end tells the client why the stream ends, if its transport can:
	// why is a hub error (hub.ErrSlow, ErrReset, ErrOverflow, ErrClosed).
	end(why error)
	// revoked tells a participant that its share link no longer holds
	// (code token_revoked or token_expired); the stream then ends.
	revoked(code chatrelay.Code)
	// name is the transport's metrics label.
	name() string
}

// opening is what a stream starts with.
type opening struct {
	ready   readyFrame
	reset   bool
	backlog []item
}

// item is one message a stream sends: a live change (ev, whose frames are
// shared) or a message of the backlog (e, as the view shows it, framed
// for this stream only), of kind k.
type item struct {
	ev     *Event
	e      store.Entry
	k      kind
	redact bool
}

// sse appends the item's SSE frame to b.
func (it item) sse(b []byte) []byte {
	if it.ev != nil {
		return append(b, it.ev.SSE(it.k, it.redact)...)
	}
	if it.k == v1Message {
		return AppendSSE(b, it.e.Epoch, it.k.name(), it.e.JSON)
	}
	return AppendSSE(b, it.e.Rev, it.k.name(), it.e.JSON2)
}

// ws returns the item's WebSocket frame: a live change's shared frame, or
// a backlog message's, built in buf (which the caller may reuse once it is
// written; never a shared frame).
func (it item) ws(buf []byte) []byte {
	if it.ev != nil {
		return it.ev.WS(it.k, it.redact)
	}
	if it.k == v1Message {
		return AppendWS(buf[:0], it.k.name(), it.e.JSON)
	}
	return AppendWS(buf[:0], it.k.name(), it.e.JSON2)
}

// session is one open stream: registered with the hub, its backlog read.
//
// An idle session holds no goroutine. What can need it (events queued by
// the hub, the heartbeat's timer, the client leaving, the principal's
// right ending) calls wake, which hands the session to a goroutine of the
// server's turners (turners.go) to take a turn only if none is running:
// pend counts the wakes not yet looked at, and the
// goroutine that takes it from 0 runs turns until a turn has seen them
// all. The goroutine that opens the stream holds the first count, so no
// turn runs before the opening is written; a session that ended keeps a
// count forever, so no turn runs after it.
type session struct {
	s       *Server
	req     streamRequest
	sub     *hub.Subscription[*Event]
	backlog store.Page
	release func()

	pend atomic.Int64 // wakes not yet seen by a turn; the running turn's goroutine holds > 0

	// Set by run, used by turns (one at a time).
	fw      frameWriter
	gone    context.Context // done when the client left or the connection failed
	last    int64           // the client's cursor: live changes at or below it are skipped
	cur     *eventBatch     // the feed batch being sent (nil: a change that came alone)
	base    int64           // the client's cursor before that batch
	fresh   []int64         // v2: the epochs sent as new messages in that batch
	ping    *time.Timer     // the heartbeat
	pingDue atomic.Bool
	stops   []func() bool // the wake registrations, undone when the session ends
	cleanup func()        // the transport's, before the session's resources go
	closed  func()        // the stream-count metric's
	ended   chan struct{} // closed once the session has ended and released everything
}

// streamRequest authenticates a stream request (a ticket or the token)
// and reads its cursor. It touches nothing on disk.
func (s *Server) streamRequest(r *http.Request, cursor string) (streamRequest, error) {
	p, err := s.streamAuth(r, "")
	if err != nil {
		return streamRequest{}, err
	}
	c, err := parseSince(cursor)
	if err != nil {
		return streamRequest{}, err
	}
	v, err := viewOf(r)
	if err != nil {
		return streamRequest{}, err
	}
	addr := clientIP(r, s.cfg.Trusted)
	return streamRequest{p: p, v: p.view(v), cursor: c, ip: limitKey(addr), addr: addr}, nil
}

// openSession takes a stream slot, registers a subscriber with the hub
// and then reads what the client missed after its cursor (the newest
// PollPage messages without one), so that nothing falls between the two.
// Its errors are the contract's refusals (too_many_streams,
// thread_unreadable, store_unavailable, and shutting down); the caller
// answers them as its transport can, before the stream starts.
func (s *Server) openSession(ctx context.Context, req streamRequest) (*session, error) {
	if !s.streamers.Enter() { // Shutdown began
		return nil, errShuttingDown
	}
	ok := false
	defer func() {
		if !ok {
			s.streamers.Leave()
		}
	}()
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	holder := chatrelay.OwnerStream
	if req.p.participant() { // a share token, or a ticket minted from one
		holder = chatrelay.ParticipantStream
	}
	release, err := s.streams.Acquire(ctx, req.p.thread, req.ip, holder)
	if err != nil {
		return nil, err
	}
	ss := &session{s: s, req: req, ended: make(chan struct{})}
	ss.pend.Store(1) // held by the opener until the opening is written
	sub, err := s.hub.SubscribeFunc(req.p.thread, ss.wake)
	if err != nil {
		release()
		return nil, errShuttingDown
	}
	page, err := req.v.read(ctx, s.store, req.p.thread, req.cursor)
	if err != nil {
		sub.Close()
		release()
		return nil, err
	}
	ok = true
	if g := req.p.grant; g != nil {
		gctx, done := s.live.acquire(req.p.thread, *g)
		req.p.ctx = gctx
		limit := release
		release = func() { done(); limit() }
		// Revoked between the check and now: the registry did not see it.
		// (The request's ctx, not the grant's: the lookup is bounded by the
		// client's staying.)
		if cur, err := s.parts.Grant(ctx, req.p.thread, g.ID); err == nil {
			if refused := s.grantRefusal(ctx, req.p.thread, cur); refused != nil {
				s.live.end(req.p.thread, g.ID, refused)
			}
		}
	}
	ss.req, ss.sub, ss.backlog, ss.release = req, sub, page, release // req with the grant's context
	return ss, nil
}

// startSession authenticates a stream request from cursor and opens its
// session; it answers a refusal itself (as the transport's handshake has
// not begun) and then returns a nil session.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, cursor string) (streamRequest, *session) {
	req, err := s.streamRequest(r, cursor)
	if err != nil {
		s.writeError(w, r, err)
		return req, nil
	}
	ss, err := s.openSession(r.Context(), req)
	if err != nil {
		if r.Context().Err() == nil {
			s.writeError(w, r, err)
		}
		return req, nil
	}
	return req, ss
}

// close releases what openSession took. Call it once.
func (ss *session) close() {
	ss.sub.Close()
	ss.release()
	ss.s.streamers.Leave()
}

// maxBatch bounds how many queued events one write takes.
const maxBatch = 64

// run writes the stream's opening (ready, reset, the backlog), then leaves
// the stream to turns started by wake and returns: the calling goroutine
// may end (a hijacked connection needs none) or wait on ss.ended (a
// stream that must keep its handler). gone is done when the client left;
// cleanup, if not nil, is the transport's teardown, run once the stream
// ended, before the session releases its slot.
func (ss *session) run(fw frameWriter, gone context.Context, cleanup func()) {
	s := ss.s
	ss.fw, ss.gone, ss.cleanup = fw, gone, cleanup
	ss.closed = s.ops.streamOpened(fw.name())
	p := ss.backlog
	v := ss.req.v
	// last is the cursor the client has from its own cursor and the
	// backlog: live changes at or below it are skipped.
	ss.last = max(ss.req.cursor, p.Cursor)
	backlog := make([]item, 0, len(p.Messages))
	for _, e := range p.Messages {
		if k, ok := v.kindOf(e, ss.req.cursor); ok {
			backlog = append(backlog, item{e: v.entry(e), k: k})
		}
	}
	if v.v2 && ss.req.cursor == 0 {
		// The newest messages come in epoch order; a v2 stream sends them
		// in change order, so that its SSE ids only grow and a client
		// resuming with Last-Event-ID repeats nothing.
		slices.SortStableFunc(backlog, func(a, b item) int { return cmp.Compare(a.e.Rev, b.e.Rev) })
	}
	err := fw.start(opening{
		ready: readyFrame{Thread: p.Thread, Cursor: p.Cursor, Awaiting: p.Awaiting},
		reset: p.Reset, backlog: backlog,
	})
	ss.backlog, backlog = store.Page{}, nil // an idle stream holds no backlog
	if err != nil {
		ss.finish()
		return
	}
	ss.ping = time.AfterFunc(s.cfg.Heartbeat, func() { ss.pingDue.Store(true); ss.wake() })
	ss.stops = append(ss.stops, ss.ping.Stop,
		context.AfterFunc(gone, ss.wake),
		context.AfterFunc(ss.req.p.ctx, ss.wake))
	ss.turns() // what came meanwhile, then park
}

// wake asks for a turn; it starts one unless one is running (or the
// opener has not finished, or the session ended).
func (ss *session) wake() {
	if ss.pend.Add(1) == 1 {
		ss.s.turners.run(ss) // one at a time, and none once it ended
	}
}

// turns runs turns until one has seen every wake, or the stream ended.
// The caller holds a count of pend.
func (ss *session) turns() {
	for {
		seen := ss.pend.Load()
		if ss.turn() {
			ss.finish() // pend stays above 0: no turn ever again
			return
		}
		if ss.pend.Add(-seen) == 0 {
			return
		}
	}
}

// turn does what is due without waiting for anything: it ends the stream
// if the client left or the principal's right ended, writes a heartbeat
// if its time came, and writes the queued events. It reports whether the
// stream ended.
func (ss *session) turn() (ended bool) {
	s, fw, v := ss.s, ss.fw, ss.req.v
	if ss.gone.Err() != nil {
		return true
	}
	if pctx := ss.req.p.ctx; pctx.Err() != nil {
		code := chatrelay.CodeOf(context.Cause(pctx))
		if code == chatrelay.TokenRevoked || code == chatrelay.TokenExpired {
			s.log.Info("a grant's stream ended", "thread", ss.req.p.thread, "grant", ss.req.p.grant.ID, "code", code)
			fw.revoked(code)
		}
		return true
	}
	if ss.pingDue.Swap(false) {
		if fw.heartbeat() != nil {
			return true
		}
		ss.ping.Reset(s.cfg.Heartbeat)
	}
	for {
		n := min(len(ss.sub.C()), maxBatch)
		if n == 0 {
			// Nothing queued, or the channel is closed: a receive tells which.
			select {
			case ev, ok := <-ss.sub.C():
				if !ok {
					why := ss.sub.Err()
					s.log.Debug("stream ended by hub", "thread", ss.req.p.thread, "transport", fw.name(), "reason", closeReason(why))
					fw.end(why)
					return true
				}
				if ss.send(v, []*Event{ev}) {
					return true
				}
				continue
			default:
				return false
			}
		}
		evs := make([]*Event, n)
		for i := range evs {
			evs[i] = <-ss.sub.C() // queued: cannot block (only this turn receives)
			if evs[i] == nil {    // closed after len was read: seen on the next pass
				evs = evs[:i]
				break
			}
		}
		if ss.send(v, evs) {
			return true
		}
	}
}

// send writes the events the client does not have yet; it reports whether
// the write failed (the stream ended).
//
// A feed batch comes in change order, which is not epoch order when it
// holds a message and a later change of an older one (see
// store.EpochOrder), and the hub queues a batch whole. So the stream takes
// a batch as a whole: v1 sends the batch's new messages in epoch order
// when it meets the batch's first event (and skips the rest); v2 sends
// each change in change order, as a message if the client could not have
// it before the batch began (its epoch is past that cursor), once.
func (ss *session) send(v view, evs []*Event) (failed bool) {
	bp := itemPool.Get().(*[]item)
	batch := (*bp)[:0]
	defer func() {
		clear(batch) // the pool holds no event
		*bp = batch[:0]
		itemPool.Put(bp)
	}()
	add := func(ev *Event) {
		if k, ok := ss.kindOf(v, ev.Entry); ok {
			ss.last = v.cursorAfter(ev.Entry)
			batch = append(batch, item{ev: ev, k: k, redact: v.redact})
		}
	}
	for _, ev := range evs {
		switch {
		case ev.batch == nil || ev.batch != ss.cur: // a batch begins
			ss.cur, ss.base, ss.fresh = ev.batch, ss.last, ss.fresh[:0]
			if v.v2 || ev.batch == nil {
				add(ev)
				continue
			}
			for _, bev := range ev.batch.byEpoch {
				add(bev)
			}
		case v.v2:
			add(ev)
		}
	}
	if len(batch) == 0 {
		return false
	}
	if ss.fw.events(batch) != nil {
		return true
	}
	ss.s.ops.delivered(ss.fw.name(), batch)
	return false
}

// itemPool holds send's batches, which the writers use only within the
// call: a batch per frame written otherwise, and an idle stream holds none.
var itemPool = sync.Pool{New: func() any { return new([]item) }}

// kindOf is view.kindOf for a live change of the current batch: v1 sends a
// message whose epoch is past the client's cursor; v2 sends a change past
// it, as a message the first time the batch brings a message the client
// could not have had before the batch (its epoch past base), else as an
// update.
func (ss *session) kindOf(v view, e store.Entry) (kind, bool) {
	if !v.v2 {
		return v1Message, e.Epoch > ss.last
	}
	if e.Rev <= ss.last {
		return 0, false
	}
	if e.Epoch > ss.base && !slices.Contains(ss.fresh, e.Epoch) {
		ss.fresh = append(ss.fresh, e.Epoch)
		return v2Message, true
	}
	return v2Update, true
}

// finish ends the stream: it undoes the wake registrations, runs the
// transport's teardown and releases what openSession took. Called once,
// by the goroutine that saw the end.
func (ss *session) finish() {
	for _, stop := range ss.stops {
		stop()
	}
	if ss.cleanup != nil {
		ss.cleanup()
	}
	ss.closed()
	ss.close()
	close(ss.ended)
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

// streamAuth authenticates a stream (file is "") or the download of the
// attachment file: a ticket (?ticket=, read-only; one minted from a grant
// dies with it) or the headers (the token, or a share link's Bearer
// token). Every member may open a stream. A file ticket opens only its
// own file: a stream, and any other file, refuse it.
func (s *Server) streamAuth(r *http.Request, file string) (principal, error) {
	if !query(r).Has("ticket") {
		return s.authenticate(r)
	}
	if len(s.tickets.key) == 0 {
		return principal{}, chatrelay.Errorf(chatrelay.InvalidTicket, "this server issues no tickets")
	}
	thread, pid, only, err := s.tickets.check(param(r, "ticket"))
	if err != nil {
		return principal{}, err
	}
	switch {
	case only != "" && file == "":
		return principal{}, chatrelay.Errorf(chatrelay.InvalidTicket, "invalid ticket: it opens one file only (%s), never a stream", only)
	case only != "" && only != file:
		return principal{}, chatrelay.Errorf(chatrelay.InvalidTicket, "invalid ticket: it opens one file only (%s), not this one", only)
	}
	noteThread(r, thread)
	p := principal{thread: thread, role: chatrelay.Owner, ticket: true, ctx: context.Background()}
	if pid == "" {
		return p, nil
	}
	if s.parts == nil {
		return principal{}, chatrelay.Errorf(chatrelay.InvalidTicket, "this server keeps no share links")
	}
	g, err := s.parts.Grant(r.Context(), thread, pid)
	if err != nil {
		if chatrelay.CodeOf(err) == chatrelay.StoreUnavailable {
			return principal{}, err
		}
		return principal{}, chatrelay.Errorf(chatrelay.InvalidTicket, "invalid ticket: its share link or device is gone")
	}
	if err := s.grantRefusal(r.Context(), thread, g); err != nil {
		s.auditGrant(r, thread, g, chatrelay.AuditRefused, chatrelay.CodeOf(err))
		return principal{}, err
	}
	noteParticipant(r, thread, g.ID)
	p.role, p.grant = g.Role, &g
	return p, nil
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
	case errors.Is(err, hub.ErrOverflow):
		return "overflow"
	default:
		return "closed"
	}
}
