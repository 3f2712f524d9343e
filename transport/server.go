// Package transport serves the chat over HTTP: the frozen v1 post and poll
// routes, the SSE and WebSocket streams, and tickets. It is the only package
// that writes an error code's HTTP status (the code table's, error.go).
package transport

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/internal/closegroup"
	"github.com/chatrelay/chatrelay/internal/samekey"
	"github.com/chatrelay/chatrelay/store"
)

// Config is what a Server needs. Store is required; the rest have defaults.
type Config struct {
	Store store.Store
	// Feed is the store's feed, read once per process: Run relays it to
	// the live streams, and whatever else the process runs (the MCP verbs)
	// subscribes to the same one. nil: store.NewFeed(Store).
	Feed *store.Feed
	Hub  *hub.Hub[*Event] // defaults to hub.New[*Event](0); fed by Run
	// Limiter and Streams count posts and open streams; nil: in this
	// process's memory (one node), with Windows and StreamLimits.
	Limiter      chatrelay.RateLimiter
	Streams      chatrelay.StreamLimiter
	Windows      chatrelay.Windows      // zero fields: the defaults
	StreamLimits chatrelay.StreamLimits // zero fields: the defaults
	Retention    chatrelay.Retention    // the store's, stated in GET /api/limits.json; zero fields: the defaults
	MCPBounds    chatrelay.MCPBounds    // serve --mcp's, stated in GET /api/limits.json; zero fields: the defaults
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
	// MaxAttachmentBytes is the most bytes of one attachment
	// (--max-attachment-bytes); defaults to chatrelay.LimitAttachmentBytes.
	MaxAttachmentBytes int64
	// TransferTime is how long an attachment's upload may take to arrive
	// and its download to leave; defaults to chatrelay.DefaultTransferTime.
	TransferTime time.Duration
	// MCP serves MCP over HTTP at <prefix>/mcp (serve --mcp) to agent keys
	// the store keeps (store.Agents); nil: /mcp is not_found (mcp.go).
	MCP MCPHandler
	// Repeats lets the posts with a client_id in one at a time per thread
	// and client_id (post). serve shares it with MCP's writes (--mcp), so
	// that a post and an agent's write with the same client_id, sent at
	// once, wait for each other as two posts do. nil: the server's own.
	Repeats *samekey.Keys
	// Push turns Web Push on (contract Part 5; webpush.go); nil, or a
	// store that keeps no subscriptions: its routes answer 404
	// push_disabled.
	Push *PushConfig
}

// Server is the chat's HTTP handler. Run feeds its hub from the store;
// Shutdown ends every stream.
type Server struct {
	cfg     Config
	store   store.Store
	feed    *store.Feed
	hub     *hub.Hub[*Event]
	limiter chatrelay.RateLimiter
	repeats *samekey.Keys // posts with a client_id, one at a time per thread and client_id (post); Config.Repeats
	streams chatrelay.StreamLimiter
	tickets tickets
	parts   store.Participants // nil if the store keeps no participants
	push    *pusher            // nil if push is off (webpushsend.go)
	live    *liveGrants        // the grants with open streams here
	origins map[string]bool
	log     *slog.Logger
	mux     *http.ServeMux
	bound   []route // the route table, bound (mux.go)

	ready     chan struct{} // closed once Run's feed is registered
	readyMu   sync.Once
	streamers closegroup.Group // stream handlers (SSE and WebSocket); Shutdown closes it and waits for them
	uploads   closegroup.Group // upload handlers; Shutdown closes it and waits for them, cutting their reads at the grace's end
	afters    atomic.Int32     // uploads' after-work waiting for the lane (afterUpload)
	ops       *ops             // metrics and readiness (metrics.go, health.go)
	turners   *turners         // the goroutines that run the sessions' turns (turners.go)

	// abortCtx is cancelled when Shutdown's grace is over, to cut the
	// streams of clients that stopped reading, and the uploads of clients
	// that stopped sending (see Shutdown).
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
	if cfg.Repeats == nil {
		cfg.Repeats = new(samekey.Keys)
	}
	if cfg.TicketTTL <= 0 {
		cfg.TicketTTL = chatrelay.DefaultTicketTTL
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = chatrelay.DefaultHeartbeat
	}
	if cfg.MaxAttachmentBytes <= 0 {
		cfg.MaxAttachmentBytes = int64(chatrelay.LimitAttachmentBytes.Max)
	}
	if cfg.TransferTime <= 0 {
		cfg.TransferTime = chatrelay.DefaultTransferTime
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = chatrelay.DefaultWriteTimeout
	}
	if cfg.Feed == nil {
		cfg.Feed = store.NewFeed(cfg.Store)
	}
	cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	s := &Server{
		cfg: cfg, store: cfg.Store, feed: cfg.Feed, hub: cfg.Hub, limiter: cfg.Limiter, repeats: cfg.Repeats, streams: cfg.Streams,
		tickets: tickets{key: cfg.TicketKey, ttl: cfg.TicketTTL, now: cfg.Now, ring: newKeyRing(cfg.TicketKeys, cfg.TicketKey, cfg.Log)},
		parts:   participantsOf(cfg.Store),
		origins: make(map[string]bool), log: cfg.Log, mux: http.NewServeMux(),
		ready: make(chan struct{}), turners: newTurners(),
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
	s.push = newPusher(s, cfg.Push)
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
