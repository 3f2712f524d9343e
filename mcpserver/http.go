package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/samekey"
	"github.com/chatrelay/chatrelay/store"
)

// HTTP serves the host's verbs over MCP's Streamable HTTP transport (the
// official SDK's handler) to agents that run elsewhere, each with an agent
// key (contract Part 5, "MCP from anywhere"). The transport authenticates
// each request (the key, the Origin) and hands it on with its key
// (ServeAgent); HTTP keeps one MCP server per key, made by New over the
// key's verbs (host.Verbs.ForAgent: its scope and its name), so the tools
// are the stdio server's, defined once.
//
// A key revoked by any process or node ends its sessions within a second:
// Run follows the store's feed of agent key changes, cancels the key's
// calls in flight and closes its sessions. Every tool call through a key
// is audited (a log line at info: the key's id and name, the tool, the
// thread, the outcome; never the key, never a text) and each write is
// counted by the rate limiter, against the thread's window and the key's
// own (as a client address's). HTTP is safe for concurrent use.
type HTTP struct {
	v   *host.Verbs
	o   HTTPOptions
	h   http.Handler
	sdk *mcp.StreamableHTTPHandler

	repeats *samekey.Keys // writes with a client_id, one at a time per thread (or key's opens) and client_id; HTTPOptions.Repeats

	mu      sync.Mutex              // guards servers, pending and closed
	servers map[string]*agentServer // by key id
	pending int                     // sessions being made (admitted, not yet counted by their server)
	closed  bool

	// uses numbers the sessions' requests in the order they came: a
	// session's last number says how recently it was used (agentServer.used).
	// A count, not a clock, so that two requests never tie, and a
	// session's first request is numbered when it came, not when its
	// answer was done (by then its client may have sent others).
	uses atomic.Uint64
}

// agentServer is the MCP server of one agent key.
type agentServer struct {
	key    chatrelay.AgentKey
	srv    *mcp.Server
	ctx    context.Context         // ended when the key is revoked or the server closes: its calls in flight end
	cancel context.CancelCauseFunc // with revoked or shuttingDown, the calls' answer
	calls  atomic.Int64            // its tool calls in flight (MaxCallsPerKey)

	mu        sync.Mutex                                   // guards posts, idle, sessPosts, sessIdle, inflight, ending, used, evicted and pending
	posts     int                                          // its POST requests being served (a call's answer is written on its POST)
	idle      chan struct{}                                // made by end while posts are served, closed when none is left
	sessPosts map[string]int                               // posts, by session id
	sessIdle  map[string]chan struct{}                     // idle, by session id: made by endSession
	inflight  map[string]map[*context.CancelCauseFunc]bool // its calls in flight, by session id: a DELETE of the session ends them
	ending    map[string]int                               // sessions being ended (endSession), by id: a call that reaches one is refused
	used      map[string]uint64                            // each session's last request, as HTTP.uses numbered it
	evicted   map[string]bool                              // sessions being closed to make room (admit): not counted
	pending   map[string]map[jsonrpc.ID]*bool              // the calls of its POSTs being served, by session id and call id: true once the client canceled it (calling)
}

// touchKnown is touch for a session already recorded; any other id is
// left out.
func (as *agentServer) touchKnown(sid string, use uint64) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if last, ok := as.used[sid]; ok {
		as.used[sid] = max(last, use)
	}
}

// touch records that the session sid was made, or called a tool, by the
// request HTTP.uses numbered use (a later request's number is kept).
func (as *agentServer) touch(sid string, use uint64) {
	if sid == "" {
		return
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.used == nil {
		as.used = map[string]uint64{}
	}
	as.used[sid] = max(as.used[sid], use)
}

// track records a call in flight of the session sid, which cancel ends;
// the returned func forgets it. A call of a session being ended
// (endSession) is not recorded: ended is true, and the call must not
// start.
func (as *agentServer) track(sid string, cancel *context.CancelCauseFunc) (forget func(), ended bool) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.ending[sid] > 0 {
		return func() {}, true
	}
	if as.inflight == nil {
		as.inflight = map[string]map[*context.CancelCauseFunc]bool{}
	}
	if as.inflight[sid] == nil {
		as.inflight[sid] = map[*context.CancelCauseFunc]bool{}
	}
	as.inflight[sid][cancel] = true
	return func() {
		as.mu.Lock()
		defer as.mu.Unlock()
		delete(as.inflight[sid], cancel)
		if len(as.inflight[sid]) == 0 {
			delete(as.inflight, sid)
		}
	}, false
}

// endSession ends the calls in flight of the session sid, which a DELETE
// ends (the SDK's close of the session waits for them): each answers
// sessionEnded on its own POST's stream, which closing the session would
// end first, so it returns once the session's POSTs are answered, or
// after d. Until done is called (once the session is closed), a call
// that reaches the session is refused sessionEnded (track) instead of
// starting: it would run on past the wait, uncanceled.
func (as *agentServer) endSession(sid string, d time.Duration, log *slog.Logger) (done func()) {
	as.mu.Lock()
	if as.ending == nil {
		as.ending = map[string]int{}
	}
	as.ending[sid]++ // a count: a DELETE and an eviction may end the same session
	for cancel := range as.inflight[sid] {
		(*cancel)(sessionEnded)
	}
	done = func() {
		as.mu.Lock()
		defer as.mu.Unlock()
		if as.ending[sid]--; as.ending[sid] <= 0 {
			delete(as.ending, sid)
		}
	}
	wait := as.sessPosts[sid] > 0
	var idle chan struct{}
	if wait {
		if as.sessIdle == nil {
			as.sessIdle = map[string]chan struct{}{}
		}
		if idle = as.sessIdle[sid]; idle == nil {
			idle = make(chan struct{})
			as.sessIdle[sid] = idle
		}
	}
	as.mu.Unlock()
	log.Debug("mcp: a session ends: its calls in flight were ended", "agent", as.key.ID)
	if wait {
		waitAtMost(idle, d)
	}
	return done
}

// sessionEnded is the cause of a call ended by a DELETE of its session (or
// by its eviction to make room):
// the call answers it as its tool error, as a revoke's, since a stream that
// ends with no answer leaves the client's call waiting for its own timeout
// (the DELETE may come from another request than the one that waits).
var sessionEnded = &chatrelay.Error{Code: chatrelay.NotFound, Message: "MCP: this session was ended: call again in a new session"}

// revoked is the cause of a call ended by its key's revoke: the call
// answers it as its tool error, so that the client is told before its
// session closes (a stream that ends with no answer leaves a client's call
// waiting for its own timeout).
var revoked = &chatrelay.Error{Code: chatrelay.TokenRevoked, Message: "this agent key was revoked"}

// shuttingDown is the answer of a call ended because the server stops
// (Close, Options.Stop): retryable, on this node once it is back or on
// another, where a revoke's answer would tell the client to give its key
// up.
var shuttingDown = chatrelay.Errorf(chatrelay.StoreUnavailable, "the server is shutting down")

// post counts a POST request of the key being served; done uncounts it.
func (as *agentServer) post(sid string) (done func()) {
	as.mu.Lock()
	as.posts++
	if sid != "" {
		if as.sessPosts == nil {
			as.sessPosts = map[string]int{}
		}
		as.sessPosts[sid]++
	}
	as.mu.Unlock()
	return func() {
		as.mu.Lock()
		defer as.mu.Unlock()
		if as.posts--; as.posts == 0 && as.idle != nil {
			close(as.idle)
			as.idle = nil
		}
		if sid == "" {
			return
		}
		if as.sessPosts[sid]--; as.sessPosts[sid] == 0 {
			delete(as.sessPosts, sid)
			if idle := as.sessIdle[sid]; idle != nil {
				close(idle)
				delete(as.sessIdle, sid)
			}
		}
	}
}

// waitAtMost waits until done is closed, or for d.
func waitAtMost(done <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// drained returns once the key's POST requests in flight have been
// answered, or after d.
func (as *agentServer) drained(d time.Duration) {
	as.mu.Lock()
	if as.posts == 0 {
		as.mu.Unlock()
		return
	}
	if as.idle == nil {
		as.idle = make(chan struct{})
	}
	idle := as.idle
	as.mu.Unlock()
	waitAtMost(idle, d)
}

// HTTPOptions tune an HTTP. Agents is required; the zero values of the
// rest are their defaults.
type HTTPOptions struct {
	Options                       // the tools' (Log, ProgressEvery); Call is HTTP's own
	Agents  store.Agents          // the keys
	Limiter chatrelay.RateLimiter // counts each write; nil: none counted
	// The bounds of this node: MaxSessions its open sessions,
	// MaxSessionsPerKey those of one key, MaxCallsPerKey one key's tool
	// calls in flight (its sessions together; a wait is in flight until it
	// returns); SessionIdle ends a session that had no request for so
	// long. Zero fields: the defaults.
	chatrelay.MCPBounds
	// Repeats lets the writes with a client_id in one at a time per
	// thread and client_id: the API's posts' (transport.Config.Repeats),
	// so that an agent's write and a person's post with the same
	// client_id, sent at once, wait for each other. nil: its own.
	Repeats *samekey.Keys
}

// NewHTTP returns the MCP HTTP server of v's verbs. Call Run to end
// revoked keys' sessions, and Close at shutdown.
func NewHTTP(v *host.Verbs, o HTTPOptions) *HTTP {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.MCPBounds = o.MCPBounds.WithDefaults()
	h := &HTTP{v: v, o: o, servers: make(map[string]*agentServer), repeats: o.Repeats}
	if h.repeats == nil {
		h.repeats = new(samekey.Keys)
	}
	h.sdk = mcp.NewStreamableHTTPHandler(h.serverOf, &mcp.StreamableHTTPOptions{
		Logger:         sdkLog(o.Log),
		SessionTimeout: o.SessionIdle,
		// The transport checks Origin against the allowed origins; a
		// server behind a proxy on loopback is reached by its public Host.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        chatrelay.MaxMCPBody,
	})
	// The SDK binds a session to the TokenInfo's UserID that made it: a
	// session id is refused with any other key.
	h.h = auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		k, ok := ctx.Value(keyOf{}).(chatrelay.AgentKey)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		// The request's link base (host.WithLinkBase, set by the
		// transport) rides with the token to each tool call (callTool).
		// So does the request itself, whose end ends a wait (callTool).
		return &auth.TokenInfo{UserID: k.ID, Extra: map[string]any{linkBaseField: host.LinkBase(ctx), requestField: ctx}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h.sdk)
	return h
}

type keyOf struct{}

// linkBaseField is the TokenInfo.Extra field of a request's link base,
// requestField that of the context of what carries the call: over HTTP the
// request's, over stdio the client's input's (Stdio).
const (
	linkBaseField = "chatrelay.link_base"
	requestField  = "chatrelay.request"
)

// ServeAgent serves an MCP request made with the agent key k (active: the
// transport checked it). It returns an error, having written nothing, when
// a new session would pass a bound (TooManyStreams) or the server is
// closing (Unavailable).
func (h *HTTP) ServeAgent(w http.ResponseWriter, r *http.Request, k chatrelay.AgentKey) error {
	ctx := context.WithValue(r.Context(), keyOf{}, k)
	if sid := r.Header.Get("Mcp-Session-Id"); r.Method == http.MethodDelete && sid != "" {
		// The SDK's close of a session waits for its calls in flight: a
		// wait would hold the DELETE until its timeout (up to 300 s).
		h.mu.Lock()
		as := h.servers[k.ID]
		h.mu.Unlock()
		if as != nil {
			defer as.endSession(sid, 500*time.Millisecond, h.o.Log)() // until the SDK closed the session
		}
	}
	var use uint64
	if r.Method == http.MethodPost {
		use = h.uses.Add(1)
		h.mu.Lock()
		as := h.servers[k.ID]
		h.mu.Unlock()
		if as != nil {
			defer as.post(r.Header.Get("Mcp-Session-Id"))()
			// Any request of a session is its use (a ping, tools/list), as
			// the idle timeout counts it: the session made room for is the
			// one whose last request is the oldest. Only a session it
			// knows (made, or called a tool): an id a client made up
			// must not grow the record.
			as.touchKnown(r.Header.Get("Mcp-Session-Id"), use)
			if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
				// A call the client cancels gets no answer (calling).
				calls := as.calling(sid, readBody(r))
				defer calls.forget()
				w = &dropCanceled{ResponseWriter: w, calls: calls}
			}
		}
	}
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		if err := initializeParams(readBody(r)); err != nil {
			return err
		}
		release, evict, err := h.admit(k)
		if err != nil {
			return err
		}
		defer release()
		if evict != nil {
			evict.close()
			h.o.Log.Info("mcp: the key's least recently used session ended to make room for a new one", "agent", k.ID, "agent_name", k.Name)
		}
		// The SDK makes the session on the server serverOf handed it: if
		// that server was ended meanwhile (Close, a revoked key) after its
		// sessions were closed, the new one is closed here, as it would
		// otherwise live (its GET stream open) until its idle timeout.
		used := new(usedServer)
		ctx = context.WithValue(ctx, usedServer{}, used)
		defer func() {
			if as := used.as; as != nil && as.ctx.Err() != nil {
				closeSessions(as.srv)
			}
		}()
		h.h.ServeHTTP(w, r.WithContext(ctx))
		if as := used.as; as != nil {
			as.touch(w.Header().Get("Mcp-Session-Id"), use)
		}
		return nil
	}
	h.h.ServeHTTP(w, r.WithContext(ctx))
	return nil
}

// usedServer is, in a request that makes a session, the key's server that
// serverOf handed the SDK (the request's own goroutine sets and reads it).
type usedServer struct{ as *agentServer }

// admit counts a session about to be made, within the bounds. When one
// would be passed, the key's least recently used session with no tool
// call in flight makes room: evict (to close before the new session is
// made). An agent that restarts without ending its session (a crash, a
// client that never sends DELETE) would otherwise find its key refused
// until its old sessions' idle timeout (--mcp-idle, 30 minutes). Only
// when every session of the key is busy is the new one refused.
func (h *HTTP) admit(k chatrelay.AgentKey) (release func(), evict *eviction, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, chatrelay.Errorf(chatrelay.StoreUnavailable, "the server is shutting down")
	}
	total, mine := h.pending, 0
	for id, as := range h.servers {
		n, lru := as.count(id == k.ID)
		total += n
		if id == k.ID {
			mine = n
			if lru != nil {
				evict = &eviction{as: as, ss: lru, log: h.o.Log}
			}
		}
	}
	if total >= h.o.MaxSessions || mine >= h.o.MaxSessionsPerKey {
		if evict == nil && mine == 0 {
			// Another key's sessions are never ended for this one.
			return nil, nil, &chatrelay.Error{Code: chatrelay.TooManyStreams, Retry: 5 * time.Second,
				Message: fmt.Sprintf("this node holds its %d open MCP sessions (--mcp-sessions), none of this key's: try again later, or another node", h.o.MaxSessions)}
		}
		if evict == nil {
			return nil, nil, &chatrelay.Error{Code: chatrelay.TooManyStreams, Retry: 5 * time.Second,
				Message: "too many open MCP sessions, each of this key's with a tool call in flight: close one (DELETE with its Mcp-Session-Id), or wait for a call to return"}
		}
		evict.mark()
	} else {
		evict = nil
	}
	h.pending++
	return func() {
		h.mu.Lock()
		h.pending--
		h.mu.Unlock()
	}, evict, nil
}

// count is the number of the key's open sessions, not counting those
// being closed to make room; with lru, also the least recently used of
// them with no tool call in flight (nil if none). It forgets what it
// kept of sessions that are gone.
func (as *agentServer) count(lru bool) (n int, oldest *mcp.ServerSession) {
	as.mu.Lock()
	defer as.mu.Unlock()
	live := map[string]bool{}
	var at uint64
	for ss := range as.srv.Sessions() {
		id := ss.ID()
		live[id] = true
		// A session whose first request was no initialize is being
		// closed by the SDK (at the end of that request): not counted.
		if ss.InitializeParams() == nil || as.evicted[id] {
			continue
		}
		n++
		if !lru || len(as.inflight[id]) > 0 {
			continue
		}
		if u := as.used[id]; oldest == nil || u < at {
			oldest, at = ss, u
		}
	}
	for id := range as.used {
		if !live[id] {
			delete(as.used, id)
		}
	}
	for id := range as.evicted {
		if !live[id] {
			delete(as.evicted, id)
		}
	}
	return n, oldest
}

// eviction is a session admit closes to make room.
type eviction struct {
	as  *agentServer
	ss  *mcp.ServerSession
	log *slog.Logger // the server's: the session's end is logged as a DELETE's
}

// mark counts the session as gone, so that no other admit counts it or
// picks it again.
func (e *eviction) mark() {
	e.as.mu.Lock()
	defer e.as.mu.Unlock()
	if e.as.evicted == nil {
		e.as.evicted = map[string]bool{}
	}
	e.as.evicted[e.ss.ID()] = true
}

// close ends the session: its client's next request is answered 404,
// which tells an MCP client to start a new session.
func (e *eviction) close() {
	defer e.as.endSession(e.ss.ID(), 500*time.Millisecond, e.log)() // a call that started since admit looked
	e.ss.Close()
}

// serverOf is the MCP server of the request's key, made on first use.
func (h *HTTP) serverOf(r *http.Request) *mcp.Server {
	k, ok := r.Context().Value(keyOf{}).(chatrelay.AgentKey)
	if !ok {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	as := h.servers[k.ID]
	if as == nil {
		if h.closed {
			return nil
		}
		as = &agentServer{key: k}
		as.ctx, as.cancel = context.WithCancelCause(context.Background())
		o := h.o.Options
		o.Call = h.call(as)
		as.srv = New(h.v.ForAgent(k), &o)
		h.servers[k.ID] = as
	}
	if used, ok := r.Context().Value(usedServer{}).(*usedServer); ok {
		used.as = as
	}
	return as.srv
}

// call is the Call of a key's tools: the audit line, the bound of its
// calls in flight, the rate limit of writes, and a context that ends when
// the key is revoked.
func (h *HTTP) call(as *agentServer) func(ctx context.Context, tool string, args json.RawMessage) (context.Context, func(error, bool), error) {
	return func(ctx context.Context, tool string, args json.RawMessage) (context.Context, func(error, bool), error) {
		var in struct {
			Thread   string `json:"thread"`
			ClientID string `json:"client_id"`
		}
		json.Unmarshal(args, &in)
		thread := in.Thread
		if !chatrelay.ValidThread(thread) {
			thread = "" // never a client's arbitrary string in the log
		}
		start := time.Now()
		var settle func(stored bool)
		var leave func()
		counted := as.calls.Add(1) <= int64(h.o.MaxCallsPerKey)
		sid, _ := ctx.Value(sessionOf{}).(string)
		as.touch(sid, h.uses.Add(1))
		ctx, cancel := context.WithCancelCause(ctx)
		forget, ended := as.track(sid, &cancel)
		stop := context.AfterFunc(as.ctx, func() { cancel(context.Cause(as.ctx)) })
		after := func(outcome error, replayed bool) {
			as.calls.Add(-1)
			forget()
			stop()
			cancel(nil)
			if settle != nil {
				settle(outcome == nil && !replayed) // only stored writes count: a repeat with its client_id stored nothing
			}
			if leave != nil {
				leave()
			}
			result := "ok"
			var e *chatrelay.Error
			switch {
			case outcome == nil:
			case errors.As(outcome, &e):
				result = string(e.Code)
			case errors.Is(outcome, context.Canceled):
				// The client canceled the call or left before its
				// answer: no failure of the server's own.
				result = "canceled"
			default:
				result = string(chatrelay.Internal)
			}
			h.o.Log.Info("mcp tool call", "agent", as.key.ID, "agent_name", as.key.Name, "tool", tool, "thread", thread,
				"outcome", result, "ms", time.Since(start).Milliseconds())
		}
		if as.ctx.Err() != nil {
			return ctx, after, context.Cause(as.ctx)
		}
		if ended {
			// Its session's DELETE (or eviction) ended the calls in flight
			// and waits for their answers: this one is refused as they
			// were answered, before it counts or waits.
			return ctx, after, sessionEnded
		}
		if !counted {
			return ctx, after, &chatrelay.Error{Code: chatrelay.TooManyStreams, Retry: time.Second,
				Message: fmt.Sprintf("too many tool calls of this agent key in flight: at most %d; wait for one to return", h.o.MaxCallsPerKey)}
		}
		// A write's repeat with its client_id waits for its first, still
		// being stored, and is then answered as a repeat, rather than
		// finding the window's place the first holds taken (rate_limited).
		if in.ClientID != "" {
			switch {
			case writes[tool] && thread != "":
				leave = h.repeats.Enter(ctx, samekey.Key{thread, in.ClientID})
			case tool == ToolName(chatrelay.VerbOpenThread):
				leave = h.repeats.Enter(ctx, samekey.Key{"open " + as.key.ID, in.ClientID}) // no thread id has a space
			}
		}
		if h.o.Limiter != nil && writes[tool] && thread != "" {
			var err error
			if settle, err = h.o.Limiter.Take(ctx, thread, "agent:"+as.key.ID); err != nil {
				// A repeat with a stored client_id is answered over a full
				// window too (the first message, or client_id_conflict),
				// as POST /api/chat/post does: it stores nothing.
				if chatrelay.CodeOf(err) == chatrelay.RateLimited && as.key.Reaches(thread) {
					if _, ok := store.StoredWith(ctx, h.v.Store, thread, in.ClientID); ok {
						return ctx, after, nil
					}
				}
				return ctx, after, err
			}
		}
		if h.o.Limiter != nil && tool == ToolName(chatrelay.VerbOpenThread) {
			// A new thread counts in the key's window, as a post that
			// makes one counts in its address's; the thread's own window
			// is the key's opens (as a reaction's is "react:" and its
			// thread), since the thread is not made yet.
			var err error
			if settle, err = h.o.Limiter.Take(ctx, "open:"+as.key.ID, "agent:"+as.key.ID); err != nil {
				// A repeat with its client_id of a thread the key opened
				// makes nothing: answered over a full window too.
				if chatrelay.CodeOf(err) == chatrelay.RateLimited && h.v.ForAgent(as.key).OpenedWith(ctx, in.ClientID) {
					return ctx, after, nil
				}
				return ctx, after, err
			}
		}
		return ctx, after, nil
	}
}

// writes are the tools that store a message in a thread: each is counted
// by the rate limiter (a reaction or a cancel changes a message, as over
// HTTP, where they are not counted either; open_thread, which makes a
// thread, is counted on its own).
var writes = map[string]bool{
	ToolName(chatrelay.VerbSend): true, ToolName(chatrelay.VerbSendCard): true,
	ToolName(chatrelay.VerbRequestInput): true, ToolName(chatrelay.VerbRequestApproval): true,
}

// Run follows the store's feed of agent key changes until ctx is done,
// ending the sessions of every key that is no longer active. It returns
// ctx's end (nil) or the feed's error.
func (h *HTTP) Run(ctx context.Context) error {
	return h.v.ChangeFeed().Follow(ctx, store.AgentsTopic, func(b store.Batch) error {
		if b.Agents || b.Reset {
			h.recheck(ctx)
		}
		return nil
	})
}

// recheck looks at every key with a server again and ends those that are
// no longer active.
func (h *HTTP) recheck(ctx context.Context) {
	h.mu.Lock()
	keys := make([]chatrelay.AgentKey, 0, len(h.servers))
	for _, as := range h.servers {
		keys = append(keys, as.key)
	}
	h.mu.Unlock()
	for _, k := range keys {
		now, err := h.o.Agents.ResolveAgent(ctx, k.Digest)
		if err != nil && chatrelay.CodeOf(err) != chatrelay.Unauthorized {
			h.o.Log.Warn("mcp: cannot look at an agent key again", "agent", k.ID, "err", err)
			continue
		}
		if err == nil && now.Active() {
			continue
		}
		h.end(k.ID, revoked)
		h.o.Log.Info("mcp: agent key revoked; its sessions ended", "agent", k.ID, "agent_name", k.Name)
	}
}

// end cancels a key's calls in flight, lets their answers (the tool error
// cause: revoked or shuttingDown) reach their clients, and closes its
// sessions, and returns once they are closed.
func (h *HTTP) end(id string, cause *chatrelay.Error) {
	h.mu.Lock()
	as := h.servers[id]
	delete(h.servers, id)
	h.mu.Unlock()
	if as == nil {
		return
	}
	as.cancel(cause) // before the sessions are listed: a session made later is closed by ServeAgent
	// A call's answer is written on its POST's stream, which closing the
	// session would end first. Half the second that a revoke has.
	as.drained(500 * time.Millisecond)
	closeSessions(as.srv)
}

// closeSessions closes srv's sessions and returns once they are closed.
func closeSessions(srv *mcp.Server) {
	var wg sync.WaitGroup
	for ss := range srv.Sessions() {
		wg.Go(func() { ss.Close() })
	}
	wg.Wait()
}

// Close ends every session (at shutdown) and refuses new ones.
func (h *HTTP) Close() {
	h.mu.Lock()
	h.closed = true
	ids := make([]string, 0, len(h.servers))
	for id := range h.servers {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.end(id, shuttingDown)
	}
}
