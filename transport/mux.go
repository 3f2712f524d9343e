package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/web"
)

// The mux is built from the route table (chatrelay.Routes, routes.go at
// the module root), which says each route's method, path, callers,
// schema entries and how it is served; handlers binds each row, by its
// Key, to the function that answers it. A row without a handler, or a
// handler without a row, is a bug: NewServer panics, and TestRouteBindings
// fails.

// handler answers a row of the route table: handle behind the gate (a
// Gated row: the caller is authenticated and its Callers checked first),
// or serve as it is (streams authenticate themselves; the rest take no
// credentials).
type handler struct {
	handle func(w http.ResponseWriter, r *http.Request, p principal)
	serve  http.HandlerFunc
}

// on is the Key of the route method path.
func on(method, path string) string { return method + " " + path }

// handlers binds every row of the route table to its handler.
func (s *Server) handlers() map[string]handler {
	return map[string]handler{
		on(http.MethodPost, chatrelay.PathPost):          {handle: s.handlePost},
		on(http.MethodGet, chatrelay.PathPoll):           {handle: s.handlePoll},
		on(http.MethodPost, chatrelay.PathTicket):        {handle: s.handleTicket},
		on(http.MethodPost, chatrelay.PathRespond):       {handle: s.handleRespond},
		on(http.MethodPost, chatrelay.PathReact):         {handle: s.handleReact},
		on(http.MethodPost, chatrelay.PathParticipants):  {handle: s.handleInvite},
		on(http.MethodGet, chatrelay.PathParticipants):   {handle: s.handleParticipants},
		on(http.MethodDelete, chatrelay.PathParticipant): {handle: s.handleRevoke},
		on(http.MethodGet, chatrelay.PathAudit):          {handle: s.handleAudit},
		on(http.MethodGet, chatrelay.PathWhoami):         {handle: s.handleWhoami},
		on(http.MethodPost, chatrelay.PathAttachments):   {handle: s.handleUpload},      // attach.go
		on(http.MethodGet, chatrelay.PathAttachment):     {handle: s.handleAttachment},  // attach.go
		on(http.MethodPost, chatrelay.PathDevices):       {handle: s.handleDeviceIssue}, // devices.go
		on(http.MethodGet, chatrelay.PathDevices):        {handle: s.handleDevices},
		on(http.MethodDelete, chatrelay.PathDevice):      {handle: s.handleDeviceRevoke},
		on(http.MethodGet, chatrelay.PathSSE):            {serve: s.handleSSE},
		on(http.MethodGet, chatrelay.PathWS):             {serve: s.handleWS},
		on(http.MethodGet, chatrelay.PathSchema):         {serve: schemaArtifact()}, // schema.go
		on(http.MethodGet, chatrelay.PathLimits):         {serve: s.limitsArtifact()},
		on(http.MethodGet, chatrelay.PathPushKey):        {serve: s.handlePushKey}, // webpush.go
		on(http.MethodPost, chatrelay.PathPush):          {handle: s.handlePushSubscribe},
		on(http.MethodGet, chatrelay.PathPush):           {handle: s.handlePushList},
		on(http.MethodDelete, chatrelay.PathPushOne):     {handle: s.handlePushDelete},
		on(http.MethodPost, chatrelay.PathRetired):       {serve: s.handleGone},
		chatrelay.Route{Path: chatrelay.PathAPI}.Key():   {serve: s.handleNotFound},
		on(http.MethodGet, chatrelay.PathPage):           {serve: s.page()},
		on(http.MethodGet, chatrelay.PathHealthz):        {serve: s.handleHealthz}, // health.go
		on(http.MethodGet, chatrelay.PathReadyz):         {serve: s.handleReadyz},
		on(http.MethodGet, chatrelay.PathMetrics):        {serve: s.metricsHandler().ServeHTTP}, // metrics.go
		on(http.MethodPost, chatrelay.PathMCP):           {serve: s.handleMCP},                  // mcp.go
		on(http.MethodGet, chatrelay.PathMCP):            {serve: s.handleMCP},
		on(http.MethodDelete, chatrelay.PathMCP):         {serve: s.handleMCP},
	}
}

// route is a row of the route table bound to its handler: its pattern
// (under the prefix, but an ops route), its method ("" for every one),
// who may use it (a gated route), and serve, which answers it (behind the
// gate for a gated route).
type route struct {
	row     chatrelay.Route
	pattern string
	method  string
	who     who
	parts   bool // it needs a store that keeps participants (else 404)
	handle  func(w http.ResponseWriter, r *http.Request, p principal)
	serve   http.HandlerFunc
}

// takes reports whether rt answers method m: its own, HEAD with GET but on
// a stream (chatrelay.Route.TakesHead), or any for a row that takes every
// method.
func (rt route) takes(m string) bool {
	return rt.row.AnyMethod || rt.method == "" || m == rt.method ||
		(m == http.MethodHead && rt.row.TakesHead())
}

// bind binds every row of the route table, in its order.
func (s *Server) bind() []route {
	hs := s.handlers()
	var out []route
	for _, row := range chatrelay.Routes() {
		h, ok := hs[row.Key()]
		gated := h.handle != nil
		if !ok || gated != row.Gated() || gated == (h.serve != nil) { // none, or not of its kind, or both
			panic(fmt.Sprintf("transport: route %s: no handler of its kind", row.Key()))
		}
		rt := route{row: row, pattern: row.Path, method: row.Method, parts: row.Participants, handle: h.handle, serve: h.serve}
		if row.Gated() {
			rt.who = whoOf(row.Callers)
			rt.serve = s.gate(rt, h.handle)
		}
		out = append(out, rt)
	}
	return out
}

// whoOf is the gate's who of a gated row's callers: any set of the
// principals' bits (chatrelay.Callers) is checked as it is written.
func whoOf(c chatrelay.Callers) who {
	if c == chatrelay.Anyone {
		panic("transport: a gated route takes no one")
	}
	return who(c)
}

// routeTable is every route that takes credentials through the gate; a
// test walks it as every kind of principal.
func (s *Server) routeTable() []route {
	var out []route
	for _, rt := range s.bound {
		if rt.row.Gated() {
			out = append(out, rt)
		}
	}
	return out
}

// routes is the whole mux, from the route table. Patterns carry no
// method, so a wrong method gets the contract's JSON 405 with an Allow
// header rather than the mux's plain-text one. An ops route is served at
// the root (probes and scrapers talk to the server directly), a private
// one only by OpsHandler when PrivateMetrics is set.
func (s *Server) routes() {
	s.bound = s.bind()
	for _, rts := range byPattern(s.bound) {
		row := rts[0].row
		if row.Private && s.cfg.PrivateMetrics {
			continue
		}
		h := s.methods(rts)
		if row.Path == chatrelay.PathPage {
			h = s.notAPI(h)
		}
		if row.CORS {
			h = s.cors(h, apiCORS) // pages of the allowed origins may call it
		}
		if row.Path == chatrelay.PathMCP {
			h = s.cors(h, mcpCORS) // and MCP, which the transport refuses to other origins
		}
		at := s.cfg.Prefix + row.Path
		if row.Mount == chatrelay.MountOps {
			at = row.Path
		}
		s.mux.Handle(at, h)
		if row.PHP {
			s.mux.Handle(at+".php", h)
		}
	}
}

// OpsHandler serves the ops routes (GET /metrics, /healthz and /readyz),
// for a private listener (--metrics-addr). Its requests are neither
// logged nor counted.
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	for _, rts := range byPattern(s.bound) {
		if rts[0].row.Mount == chatrelay.MountOps {
			mux.Handle(rts[0].row.Path, s.methods(rts))
		}
	}
	return mux
}

// byPattern groups routes by path, in the table's order. The routes of
// one path must agree on how they are served.
func byPattern(rts []route) [][]route {
	var out [][]route
	at := map[string]int{}
	for _, rt := range rts {
		i, ok := at[rt.pattern]
		if !ok {
			i = len(out)
			at[rt.pattern] = i
			out = append(out, nil)
		} else if f := out[i][0].row; f.CORS != rt.row.CORS || f.PHP != rt.row.PHP || f.Mount != rt.row.Mount || f.Private != rt.row.Private {
			panic("transport: the routes of " + rt.pattern + " are served differently")
		}
		out[i] = append(out[i], rt)
	}
	return out
}

// methods serves the routes of one pattern, each for its methods; any
// other method is 405 with Allow naming them.
func (s *Server) methods(rts []route) http.Handler {
	var allow []string
	for _, rt := range rts {
		allow = append(allow, rt.method)
	}
	allowed := strings.Join(allow, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range rts {
			if rts[i].takes(r.Method) {
				s.serveRoute(w, r, &rts[i])
				return
			}
		}
		w.Header().Set("Allow", allowed)
		noteRefused(r, chatrelay.MethodNotAllowed)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "Method not allowed", Code: chatrelay.MethodNotAllowed})
	})
}

// serveRoute serves r by rt. It is a call of its own so that its defer is
// not in a loop: a deferred call in a loop is allocated on the heap, one
// a request.
func (s *Server) serveRoute(w http.ResponseWriter, r *http.Request, rt *route) {
	if rt.row.Stream == "" { // streams end at shutdown their own way
		defer s.cutAtAbort(w, r)()
	}
	rt.serve(w, r)
}

// gate authenticates a request and lets through the principals rt takes.
// (A share token on a store without participants is refused by
// authenticate.)
func (s *Server) gate(rt route, h func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		if settles(rt.row) {
			ctx, stop := s.settledReq(r)
			defer stop()
			r = r.WithContext(ctx)
		}
		var p principal
		var err error
		if rt.row.Ticket {
			p, err = s.streamAuth(r, r.PathValue("id")) // a ticket (a thread's, or this file's), or the headers
		} else {
			p, err = s.authenticate(r)
		}
		if err == nil {
			err = rt.who.allows(p)
		}
		if err == nil && rt.parts && s.parts == nil {
			err = chatrelay.Errorf(chatrelay.NotFound, "this server's store keeps no participants")
		}
		if err != nil {
			s.writeError(rw, r, err)
			return
		}
		h(rw, withPrincipal(r, p), p)
	}
}

// settles reports whether a request of the route is carried through
// whatever its client does once the request is in: a write whose request
// is read whole before it acts (a JSON body or none), bounded by the
// store's own timeouts. net/http cancels a request's context when the
// client closes its side of the connection, which a client may do once its
// request is sent while it still reads the answer; a write cut there
// might have run all the same, and would be answered as failed (503) on
// one store and 201 on the other. An upload reads its body as it works,
// and stops when its client does.
func settles(row chatrelay.Route) bool {
	return (row.Method == http.MethodPost || row.Method == http.MethodDelete) && !row.Upload
}

// settled is the context of a write that settles: ctx's values without
// its cancel, ended only by the shutdown's abort, so that a write still
// waiting when the grace is over (for a thread's lock another process
// holds) gives up, answered 503, and the server stops in time. stop lets
// go of it once the write is answered.
func (s *Server) settled(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(s.abortCtx, cancel)
	return ctx, func() { unhook(); cancel() }
}

// settledReq is settled for a request: when cutAtAbort hooked it on the
// abort, the hook ends the write's context too (one registration on the
// abort a request, not two).
func (s *Server) settledReq(r *http.Request) (_ context.Context, stop func()) {
	ri := infoOf(r)
	if ri == nil || !ri.abort.on {
		return s.settled(r.Context())
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	ri.abort.settle(cancel)
	return ctx, cancel
}

// abortHook is what Shutdown's abort ends of a request beside the read of
// its body and the write of its answer (cutAtAbort): the context of a
// write that settles, if it has one.
type abortHook struct {
	on      bool // cutAtAbort hooked the request: set before the hook can run
	mu      sync.Mutex
	aborted bool
	cancel  context.CancelFunc
}

// settle has the abort call cancel, at once if it came already.
func (h *abortHook) settle(cancel context.CancelFunc) {
	h.mu.Lock()
	h.cancel = cancel
	aborted := h.aborted
	h.mu.Unlock()
	if aborted {
		cancel()
	}
}

// fire is the abort's: it ends the write's context, and any set later.
func (h *abortHook) fire() {
	h.mu.Lock()
	h.aborted = true
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// page serves the page (web.Handler) under the prefix.
func (s *Server) page() http.HandlerFunc {
	page := web.Handler(s.frameAncestors()...)
	if s.cfg.Prefix != "" {
		page = http.StripPrefix(s.cfg.Prefix, page)
	}
	return page.ServeHTTP
}

// notAPI serves h, the page's routes, but for a path under /api/ once
// decoded (/api%2Fchat/poll), which matches no API pattern (the mux
// matches escaped segments): it is still no such route of the API,
// answered as one whatever its method, never with the page's plain-text
// 404 or its 405 (Allow: GET would name a method of a route not there).
// So is a path under /mcp/: an agent's MCP URL written with a trailing
// slash, told where MCP is.
func (s *Server) notAPI(h http.Handler) http.Handler {
	api := s.cfg.Prefix + chatrelay.PathAPI
	mcp := s.cfg.Prefix + chatrelay.PathMCP
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, api) {
			s.handleNotFound(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, mcp+"/") {
			s.writeError(w, r, chatrelay.Errorf(chatrelay.NotFound, "no such route: MCP is served at %s, without a trailing slash", mcp))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, chatrelay.Errorf(chatrelay.NotFound, "no such route"))
}

// corsHeaders are the request headers a page may send (a preflight's
// Access-Control-Allow-Headers) and the answer's headers it may read
// (Access-Control-Expose-Headers).
type corsHeaders struct{ allow, expose string }

var (
	apiCORS = corsHeaders{allow: "X-Chat-Token, Authorization, Content-Type, Last-Event-ID, X-Filename", expose: "Idempotent-Replayed, Date, Retry-After"}
	// MCP's Streamable HTTP: the key, the session and the protocol
	// version; a client reads the session id, and a 401's challenge.
	mcpCORS = corsHeaders{allow: "Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID", expose: "Mcp-Session-Id, WWW-Authenticate, Date, Retry-After"}
)

// cors lets the pages of the allowed origins call h, answering their
// preflights. Other origins get no CORS headers, so browsers refuse them.
func (s *Server) cors(h http.Handler, ch corsHeaders) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && s.originAllowed(origin, "") {
			hd := w.Header()
			hd.Set("Access-Control-Allow-Origin", origin)
			hd.Set("Access-Control-Expose-Headers", ch.expose)
			hd.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				hd.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
				hd.Set("Access-Control-Allow-Headers", ch.allow)
				hd.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		} else if origin != "" {
			w.Header().Add("Vary", "Origin")
		}
		h.ServeHTTP(w, r)
	})
}

// shutdownAnswerTime is how long a request's answer may take to be
// written once Shutdown's grace is over: enough for a live client to take
// an answer (a write that gave up waiting for a thread's lock is answered
// 503 then), and short enough that the server still stops within its 5 s.
const shutdownAnswerTime = time.Second

// cutAtAbort makes Shutdown's abort (the end of its grace) cut a request
// whose client is not keeping up, as a stream's is, so that
// http.Server.Shutdown need not wait for it past its own deadline (30 s
// ReadTimeout and WriteTimeout, 10 minutes for an attachment's transfer):
//
//   - the read of r's body, if it is still arriving then (its client
//     stopped sending, or sends too slowly to end in time), as an
//     upload's: the read fails with errShuttingDown, so the request stores
//     nothing and is answered 503 store_unavailable (retryable). Once the
//     body has been read to its end the read deadline is left alone (a
//     write under way is carried through);
//   - the write of its answer, shutdownAnswerTime later (a client that
//     does not read its answers, such as pipelined polls of a long thread).
//
// MCP's requests too: its sessions end first, and a wait in flight is
// answered at once. It returns the function that undoes it, for when the
// handler returns.
func (s *Server) cutAtAbort(w http.ResponseWriter, r *http.Request) func() bool {
	ri := infoOf(r)
	var b *abortableBody
	if r.Body != nil && r.Body != http.NoBody {
		if ri != nil && ri.body.ReadCloser == nil {
			b = &ri.body // in the request's reqInfo: no allocation of its own
		} else {
			b = new(abortableBody)
		}
		b.ReadCloser, b.abort = r.Body, s.abortCtx
		r.Body = b
	}
	if ri != nil {
		ri.abort.on = true
	}
	return context.AfterFunc(s.abortCtx, func() {
		if ri != nil {
			ri.abort.fire()
		}
		rc := http.NewResponseController(w) // here, not per request: an abort is rare
		if b != nil && !b.done.Load() {
			rc.SetReadDeadline(time.Now())
		}
		rc.SetWriteDeadline(time.Now().Add(shutdownAnswerTime))
	})
}

// abortableBody is a request's body whose read Shutdown's abort may cut
// (cutAtAbort).
type abortableBody struct {
	io.ReadCloser
	abort context.Context
	done  atomic.Bool // read to its end: the abort leaves the read deadline alone
}

func (b *abortableBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.done.Store(true)
	case err != nil && b.abort.Err() != nil:
		return n, errShuttingDown
	}
	return n, err
}
