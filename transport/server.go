// Package transport serves the chat over HTTP: the frozen v1 post and poll
// routes, the SSE and WebSocket streams, and tickets. It is the only package
// that maps an error code to an HTTP status.
package transport

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/web"
)

// Config is what a Server needs. Store is required; the rest have defaults.
type Config struct {
	Store   store.Store
	Limiter RateLimiter    // defaults to a MemoryLimiter with default windows
	Prefix  string         // mount point of the whole API, "" or "/spaces/newos4"
	Trusted []netip.Prefix // proxies whose X-Forwarded-For is believed
	Log     *slog.Logger   // defaults to slog.Default()
}

// Server is the chat's HTTP handler.
type Server struct {
	cfg     Config
	store   store.Store
	limiter RateLimiter
	log     *slog.Logger
	mux     *http.ServeMux
}

// NewServer returns the chat's HTTP handler.
func NewServer(cfg Config) *Server {
	s := &Server{cfg: cfg, store: cfg.Store, limiter: cfg.Limiter, log: cfg.Log, mux: http.NewServeMux()}
	if s.limiter == nil {
		s.limiter = NewMemoryLimiter(Windows{}, nil)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	s.routes()
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// routes is the whole API. Each v1 route is also served with a .php suffix.
// Patterns carry no method, so a wrong method gets the contract's JSON 405
// with an Allow header rather than the mux's plain-text one.
func (s *Server) routes() {
	p := s.cfg.Prefix
	for _, suffix := range []string{"", ".php"} {
		s.mux.Handle(p+"/api/chat/post"+suffix, only(http.MethodPost, s.handlePost))
		s.mux.Handle(p+"/api/chat/poll"+suffix, only(http.MethodGet, s.handlePoll))
		s.mux.HandleFunc(p+"/api/debug/agent-replies"+suffix, s.handleGone)
	}
	s.mux.HandleFunc(p+"/api/", s.handleNotFound)
	page := web.Handler()
	if p != "" {
		page = http.StripPrefix(p, page)
	}
	s.mux.Handle(p+"/", only(http.MethodGet, page.ServeHTTP))
}

// only refuses every method but m (and HEAD with GET) with 405.
func only(m string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			errBody := errorBody{Error: "Method not allowed", Code: hub.MethodNotAllowed}
			writeJSON(w, http.StatusMethodNotAllowed, errBody)
			return
		}
		h(w, r)
	})
}

func (s *Server) handleGone(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusGone, errorBody{
		Error: "this route is retired; post with " + s.cfg.Prefix + "/api/chat/post",
		Code:  hub.Gone, See: s.cfg.Prefix + "/api/chat/post",
	})
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, hub.Errorf(hub.NotFound, "no such route"))
}

// threadOf authenticates a request by its X-Chat-Token header. It touches
// nothing on disk.
func threadOf(r *http.Request) (string, error) {
	tok := r.Header.Get("X-Chat-Token")
	if !hub.ValidToken(tok) {
		return "", hub.Errorf(hub.Unauthorized, "missing or malformed X-Chat-Token")
	}
	return hub.ThreadOf(tok), nil
}

// postAnswer is the 201 of a post, fields in the contract's order.
type postAnswer struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
	Epoch   int64  `json:"epoch"`
	TS      string `json:"ts"`
	Thread  string `json:"thread"`
}

func (s *Server) handlePost(w http.ResponseWriter, r *http.Request) {
	thread, err := threadOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := parsePost(data)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := s.post(r, thread, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, postAnswer{Success: true, ID: e.ID, Epoch: e.Epoch, TS: e.TS, Thread: thread})
}

// post counts a checked post against the rate windows and stores it. It is
// the one write path of browsers, over HTTP and over the WebSocket.
func (s *Server) post(r *http.Request, thread string, p postBody) (store.Entry, error) {
	undo, err := s.limiter.Take(r.Context(), thread, clientIP(r, s.cfg.Trusted))
	if err != nil {
		return store.Entry{}, err
	}
	e, err := s.store.Append(r.Context(), thread, store.NewMessage{Author: p.Kind, Text: p.Text})
	if err != nil {
		undo()
		return store.Entry{}, err
	}
	return e, nil
}

func (s *Server) handlePoll(w http.ResponseWriter, r *http.Request) {
	thread, err := threadOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	since, err := parseSince(r.URL.Query().Get("since"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pg, err := s.store.Since(r.Context(), thread, since, limitFor(since))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	buf := make([]byte, 0, 128+len(pg.Messages)*192)
	writeBytes(w, http.StatusOK, appendPage(buf, pg))
}

// limitFor is the page size of a read from cursor since: without a cursor,
// the newest 50 messages; with one, everything after it.
func limitFor(since int64) int {
	if since == 0 {
		return 50
	}
	return 0
}
