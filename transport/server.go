// Package transport serves the chat over HTTP: the frozen v1 post and poll
// routes, the SSE and WebSocket streams, and tickets. It is the only package
// that maps an error code to an HTTP status.
package transport

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/web"
)

// Config is what a Server needs. Store is required; the rest have defaults.
type Config struct {
	Store store.Store
	Hub   *hub.Hub[*Event] // defaults to hub.New[*Event](0); fed by Run
	// Limiter and Streams count posts and open streams; nil: in this
	// process's memory (one node), with Windows and StreamLimits.
	Limiter      chatrelay.RateLimiter
	Streams      chatrelay.StreamLimiter
	Windows      chatrelay.Windows      // zero fields: the defaults
	StreamLimits chatrelay.StreamLimits // zero fields: the defaults
	Retention    chatrelay.Retention    // the store's, stated in GET /api/limits.json; zero fields: the defaults
	Prefix       string                 // mount point of the whole API, "" or "/spaces/newos4"
	Trusted      []netip.Prefix         // proxies whose X-Forwarded-For is believed
	// AllowedOrigins are the other origins ("https://app.example.com") whose
	// pages may use the API: CORS on post, poll, ticket and stream, and the
	// WebSocket origin check, both by one exact matcher (origin.go; no
	// patterns). The server's own origin is always allowed. They alone may
	// frame the chat's pages (CSP frame-ancestors; none by default).
	AllowedOrigins []string
	TicketKey      []byte        // HMAC key of tickets; required for tickets (32 random bytes)
	TicketKeys     TicketKeys    // where TicketKey came from, if it may change (shared in Redis): read again to sign and verify (ticketkeys.go)
	TicketTTL      time.Duration // defaults to chatrelay.DefaultTicketTTL
	Heartbeat      time.Duration // SSE ping comment and WebSocket ping interval; defaults to chatrelay.DefaultHeartbeat
	WriteTimeout   time.Duration // per stream write; defaults to chatrelay.DefaultWriteTimeout
	Log            *slog.Logger  // defaults to slog.Default()
	Now            func() time.Time
	// AfterFunc runs f once d has passed on Now's clock; defaults to
	// time.AfterFunc (tests give a settable clock's).
	AfterFunc func(d time.Duration, f func()) interface{ Stop() bool }
	// PublicURL is the base of share links (https://chat.example.com,
	// with the prefix if any); "" builds it from each request.
	PublicURL string
	// PrivateMetrics leaves GET /metrics off this handler: it is served
	// only by OpsHandler, on a private listener (--metrics-addr).
	PrivateMetrics bool
}

// Server is the chat's HTTP handler. Run feeds its hub from the store;
// Shutdown ends every stream.
type Server struct {
	cfg     Config
	store   store.Store
	hub     *hub.Hub[*Event]
	limiter chatrelay.RateLimiter
	streams chatrelay.StreamLimiter
	tickets tickets
	parts   store.Participants // nil if the store keeps no participants
	live    *liveGrants        // the grants with open streams here
	origins map[string]bool
	log     *slog.Logger
	mux     *http.ServeMux

	ready     chan struct{} // closed once Run's feed is registered
	readyMu   sync.Once
	streamsWG sync.WaitGroup // stream handlers (SSE and WebSocket); Shutdown waits for them
	closeMu   sync.Mutex     // orders streamsWG.Add (enterStream) before Shutdown's Wait
	closing   bool           // Shutdown began; guarded by closeMu
	ops       *ops           // metrics and readiness (metrics.go, health.go)

	// abortCtx is cancelled when Shutdown's grace is over, to cut the
	// streams of clients that stopped reading (see Shutdown).
	abortCtx context.Context
	abort    context.CancelFunc
}

// NewServer returns the chat's HTTP handler. Call Run to feed its hub: a
// stream waits for Run's feed before it reads its backlog.
func NewServer(cfg Config) *Server {
	if cfg.Hub == nil {
		cfg.Hub = hub.New[*Event](0)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) interface{ Stop() bool } { return time.AfterFunc(d, f) }
	}
	cfg.Windows, cfg.StreamLimits = cfg.Windows.WithDefaults(), cfg.StreamLimits.WithDefaults()
	if cfg.Limiter == nil {
		cfg.Limiter = NewMemoryLimiter(cfg.Windows, cfg.Now)
	}
	if cfg.Streams == nil {
		cfg.Streams = NewMemoryStreams(cfg.StreamLimits.PerThread, cfg.StreamLimits.PerIP)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.TicketTTL <= 0 {
		cfg.TicketTTL = chatrelay.DefaultTicketTTL
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = chatrelay.DefaultHeartbeat
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = chatrelay.DefaultWriteTimeout
	}
	cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	s := &Server{
		cfg: cfg, store: cfg.Store, hub: cfg.Hub, limiter: cfg.Limiter, streams: cfg.Streams,
		tickets: tickets{key: cfg.TicketKey, ttl: cfg.TicketTTL, now: cfg.Now, ring: newKeyRing(cfg.TicketKeys, cfg.TicketKey, cfg.Log)},
		parts:   participantsOf(cfg.Store),
		origins: make(map[string]bool), log: cfg.Log, mux: http.NewServeMux(),
		ready: make(chan struct{}),
	}
	s.live = &liveGrants{s: s, m: make(map[string]*liveGrant)}
	s.abortCtx, s.abort = context.WithCancel(context.Background())
	for _, o := range cfg.AllowedOrigins {
		// "https://App.example.com:443/" means the origin "https://app.example.com".
		c, err := CheckOrigin(o)
		if err != nil {
			s.log.Warn("an allowed origin that is not an origin is left out", "err", err)
			continue
		}
		s.origins[c] = true
	}
	s.initOps()
	s.routes()
	return s
}

// frameAncestors are the origins whose pages may frame the chat's pages:
// the allowed origins (CheckOrigin's form, sorted), but an IPv6 literal,
// which a CSP source cannot name.
func (s *Server) frameAncestors() []string {
	var out []string
	for o := range s.origins {
		if !strings.Contains(o, "://[") {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// ServeHTTP serves the API, timing and logging each request (accesslog.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.observe(w, r) }

// route is one route of the API: its pattern (under the prefix), its
// method, who may use it, and its handler. The table (routeTable) is
// the one place that says who may use what; a test walks it as every
// kind of principal.
type route struct {
	pattern string
	method  string
	who     who
	parts   bool // it needs a store that keeps participants (else 404)
	handle  func(w http.ResponseWriter, r *http.Request, p principal)
}

// routeTable is every route that takes credentials. The v1 routes are
// also served with a .php suffix.
func (s *Server) routeTable() []route {
	return []route{
		{"/api/chat/post", http.MethodPost, writers, false, s.handlePost},
		{"/api/chat/poll", http.MethodGet, members, false, s.handlePoll},
		{"/api/chat/ticket", http.MethodPost, members, false, s.handleTicket},
		{"/api/chat/respond", http.MethodPost, ownerOnly, false, s.handleRespond},
		{"/api/chat/react", http.MethodPost, writers, false, s.handleReact},
		{"/api/chat/participants", http.MethodPost, ownerOnly, true, s.handleInvite},
		{"/api/chat/participants", http.MethodGet, ownerOnly, true, s.handleParticipants},
		{"/api/chat/participants/{id}", http.MethodDelete, ownerOnly, true, s.handleRevoke},
		{"/api/chat/participants/audit", http.MethodGet, ownerOnly, true, s.handleAudit},
		{"/api/chat/whoami", http.MethodGet, members, false, s.handleWhoami},
	}
}

// routes is the whole API. Patterns carry no method, so a wrong method
// gets the contract's JSON 405 with an Allow header rather than the mux's
// plain-text one. The streams authenticate themselves (they also take
// tickets): members may open them.
func (s *Server) routes() {
	p := s.cfg.Prefix
	byPattern := map[string][]route{}
	var order []string
	for _, rt := range s.routeTable() {
		if byPattern[rt.pattern] == nil {
			order = append(order, rt.pattern)
		}
		byPattern[rt.pattern] = append(byPattern[rt.pattern], rt)
	}
	for _, pattern := range order {
		h := s.cors(s.methods(byPattern[pattern])) // pages of the allowed origins may call every route
		s.mux.Handle(p+pattern, h)
		if pattern == "/api/chat/post" || pattern == "/api/chat/poll" {
			s.mux.Handle(p+pattern+".php", h)
		}
	}
	for _, suffix := range []string{"", ".php"} {
		s.mux.HandleFunc(p+"/api/debug/agent-replies"+suffix, s.handleGone)
	}
	s.mux.Handle(p+"/api/chat/stream", s.cors(onlyStream(s.handleSSE)))
	s.mux.Handle(p+"/api/chat/ws", onlyStream(s.handleWS))
	s.mux.Handle(p+"/api/schema.json", s.cors(only(http.MethodGet, schemaArtifact()))) // schema.go
	s.mux.Handle(p+"/api/limits.json", s.cors(only(http.MethodGet, s.limitsArtifact())))
	s.mux.HandleFunc(p+"/api/", s.handleNotFound)
	page := web.Handler(s.frameAncestors()...)
	if p != "" {
		page = http.StripPrefix(p, page)
	}
	s.mux.Handle(p+"/", only(http.MethodGet, page.ServeHTTP))
}

// methods serves the routes of one pattern, each for its method (GET
// answers HEAD too); any other method is 405 with Allow naming them.
func (s *Server) methods(rts []route) http.Handler {
	var allow []string
	for _, rt := range rts {
		allow = append(allow, rt.method)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, rt := range rts {
			if r.Method == rt.method || (rt.method == http.MethodGet && r.Method == http.MethodHead) {
				s.gate(rt, rt.handle)(w, r)
				return
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		noteRefused(r, chatrelay.MethodNotAllowed)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "Method not allowed", Code: chatrelay.MethodNotAllowed})
	})
}

// gate authenticates a request and lets through the principals rt takes.
// (A share token on a store without participants is refused by
// authenticate.)
func (s *Server) gate(rt route, h func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		p, err := s.authenticate(r)
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

// only refuses every method but m (and HEAD with GET) with 405.
func only(m string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			noteRefused(r, chatrelay.MethodNotAllowed)
			errBody := errorBody{Error: "Method not allowed", Code: chatrelay.MethodNotAllowed}
			writeJSON(w, http.StatusMethodNotAllowed, errBody)
			return
		}
		h(w, r)
	})
}

// onlyStream refuses every method but GET, HEAD included: a stream is a
// body, and HEAD would open one whose writes are discarded, so it would
// never notice its client leave.
func onlyStream(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			noteRefused(r, chatrelay.MethodNotAllowed)
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "Method not allowed", Code: chatrelay.MethodNotAllowed})
			return
		}
		h(w, r)
	})
}

func (s *Server) handleGone(w http.ResponseWriter, r *http.Request) {
	noteRefused(r, chatrelay.Gone)
	// "see" is the contract's frozen value; the words name the mounted path.
	writeJSON(w, http.StatusGone, errorBody{
		Error: "this route is retired; post with " + s.cfg.Prefix + "/api/chat/post",
		Code:  chatrelay.Gone, See: "/api/chat/post",
	})
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, chatrelay.Errorf(chatrelay.NotFound, "no such route"))
}

// threadOf authenticates a request by its X-Chat-Token header. It touches
// nothing on disk. A ticket, which only streams accept, is refused.
func threadOf(r *http.Request) (string, error) {
	tok := r.Header.Get("X-Chat-Token")
	if !chatrelay.ValidToken(tok) {
		if tok == "" && r.URL.Query().Has("ticket") {
			return "", chatrelay.Errorf(chatrelay.InvalidTicket, "a ticket only opens a stream; post and poll need X-Chat-Token")
		}
		return "", chatrelay.Errorf(chatrelay.Unauthorized, "missing or malformed X-Chat-Token")
	}
	thread := chatrelay.ThreadOf(tok)
	noteThread(r, thread)
	return thread, nil
}

func (s *Server) handleTicket(w http.ResponseWriter, r *http.Request, p principal) {
	if len(s.tickets.key) == 0 {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.NotFound, "this server issues no tickets"))
		return
	}
	pid := ""
	if p.grant != nil {
		pid = p.grant.ID
	}
	t, exp := s.tickets.mint(p.thread, pid)
	writeJSON(w, http.StatusCreated, ticketAnswer{Success: true, Ticket: t, Thread: p.thread, ExpiresAt: exp})
}

// cors lets the pages of the allowed origins call h, answering their
// preflights. Other origins get no CORS headers, so browsers refuse them.
func (s *Server) cors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && s.originAllowed(origin, "") {
			hd := w.Header()
			hd.Set("Access-Control-Allow-Origin", origin)
			hd.Set("Access-Control-Expose-Headers", "Idempotent-Replayed, Date, Retry-After")
			hd.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				hd.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
				hd.Set("Access-Control-Allow-Headers", "X-Chat-Token, Authorization, Content-Type, Last-Event-ID")
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

// postAnswer is the 201 of a post, fields in the contract's order.
type postAnswer struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
	Epoch   int64  `json:"epoch"`
	TS      string `json:"ts"`
	Thread  string `json:"thread"`
}

func (s *Server) handlePost(w http.ResponseWriter, r *http.Request, who principal) {
	thread := who.thread
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := parsePost(data, who)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := s.post(r.Context(), limitKey(clientIP(r, s.cfg.Trusted)), who, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if e.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, postAnswer{Success: true, ID: e.ID, Epoch: e.Epoch, TS: e.TS, Thread: thread})
}

// post counts a checked post against the rate windows of the thread and of
// ipKey (limitKey's) and stores it. It is the one write path of browsers
// and participants, over HTTP and over the WebSocket. A post whose
// client_id the thread already holds is answered that message again
// (Entry.Replayed), or 409 client_id_conflict if it is another message,
// stores nothing and counts in no window, even a full one: over a full
// window it gets the answer a retry would get, never 429.
func (s *Server) post(ctx context.Context, ipKey string, who principal, p postBody) (store.Entry, error) {
	thread := who.thread
	m := store.NewMessage{Author: p.Kind, Text: p.Text, ClientID: p.ClientID}
	if g := who.grant; g != nil {
		m.Author, m.AuthorName, m.Participant = g.Author(), g.Name, g.ID
	}
	undo, err := s.limiter.Take(ctx, thread, ipKey)
	if err != nil {
		if p.ClientID != "" && chatrelay.CodeOf(err) == chatrelay.RateLimited {
			if e, ok := s.storedWith(ctx, thread, m.ClientID); ok {
				return store.ReplayOf(e, m)
			}
		}
		return store.Entry{}, err
	}
	e, err := s.store.Append(ctx, thread, m)
	if err != nil || e.Replayed {
		undo()
	}
	return e, err
}

// storedWith finds the retained message of thread that carries clientID.
func (s *Server) storedWith(ctx context.Context, thread, clientID string) (store.Entry, bool) {
	p, err := s.store.Changes(ctx, thread, 0, 0)
	if err != nil {
		return store.Entry{}, false
	}
	for _, e := range p.Messages {
		if e.ClientID == clientID {
			return e, true
		}
	}
	return store.Entry{}, false
}

func (s *Server) handlePoll(w http.ResponseWriter, r *http.Request, who principal) {
	thread := who.thread
	since, err := parseSince(r.URL.Query().Get("since"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v, err := viewOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v = who.view(v)
	pg, err := v.read(r.Context(), s.store, thread, since)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	bp := pageBufs.Get().(*[]byte)
	b := appendPage((*bp)[:0], pg, v)
	writeBytes(w, http.StatusOK, b)
	if cap(b) <= 1<<20 { // a rare huge answer is not kept
		*bp = b[:0]
		pageBufs.Put(bp)
	}
}

// pageBufs recycles the buffers poll answers are assembled in: an answer
// is written (net/http copies or sends it) before its handler returns.
var pageBufs = sync.Pool{New: func() any { return new([]byte) }}

// limitFor is the page size of a read from cursor since: without a cursor,
// the newest 50 messages; with one, everything after it.
func limitFor(since int64) int {
	if since == 0 {
		return chatrelay.PollPage
	}
	return 0
}
