package chatrelay

import (
	"slices"
	"strings"
)

// The route table: every route the server answers, written once. The
// transport builds its whole mux from it (transport/mux.go binds each row
// to its handler by Key, and a test fails on a row without a handler or a
// handler without a row), and the schema bundle's x-routes is derived from
// it (schema.go). A path is written once, here, as a constant; the code
// that needs one (a client, a refusal's words) names the constant.

// The paths of the API (under the prefix, if the server has one).
const (
	PathPost         = "/api/chat/post"
	PathPoll         = "/api/chat/poll"
	PathTicket       = "/api/chat/ticket"
	PathRespond      = "/api/chat/respond"
	PathReact        = "/api/chat/react"
	PathAttachments  = "/api/chat/attachments"
	PathAttachment   = PathAttachments + "/{id}"
	PathParticipants = "/api/chat/participants"
	PathParticipant  = PathParticipants + "/{id}"
	PathAudit        = PathParticipants + "/audit"
	PathWhoami       = "/api/chat/whoami"
	PathDevices      = "/api/chat/devices"
	PathDevice       = PathDevices + "/{id}"
	PathSSE          = "/api/chat/stream"
	PathWS           = "/api/chat/ws"
	PathSchema       = "/api/schema.json"
	PathLimits       = "/api/limits.json"
	PathRetired      = "/api/debug/agent-replies" // Part 1's retired route: 410
	PathAPI          = "/api/"                    // every other path under it: 404
	PathPage         = "/"
	PathHealthz      = "/healthz"
	PathReadyz       = "/readyz"
	PathMetrics      = "/metrics"
	PathMCP          = "/mcp"             // MCP's Streamable HTTP (serve --mcp; Part 5)
	PathPushKey      = "/api/push/key"    // Part 5: the VAPID public key
	PathPush         = "/api/chat/push"   // Part 5: the caller's push subscriptions
	PathPushOne      = PathPush + "/{id}" // Part 5: one of them
)

// Callers says who may call a route: a set of principals. The zero value,
// Anyone, takes no credentials at all.
type Callers uint8

// The principals a route may take.
const (
	CallerOwner     Callers = 1 << iota // the thread's token (X-Chat-Token)
	CallerViewer                        // a participant whose role is viewer
	CallerCommenter                     // a participant whose role is commenter
	CallerDevice                        // one of the owner's devices (Part 5: Bearer chd_…)

	Anyone  Callers = 0                                       // no credentials
	Owners          = CallerOwner | CallerDevice              // the owner, on any of its devices
	Members         = Owners | CallerViewer | CallerCommenter // the owner and every participant
	Writers         = Owners | CallerCommenter                // who may post: a viewer may not
)

// Mount says where a route is served and whether the bundle describes it.
type Mount uint8

const (
	MountAPI  Mount = iota // under the prefix; in x-routes if it has a Method
	MountPage              // under the prefix; a page, not in x-routes
	MountOps               // at the root, never under the prefix (probes and scrapers), and on the private ops listener
)

// Stream kinds: what a stream route opens (x-routes' "stream").
const (
	StreamSSE       = "sse"
	StreamWebSocket = "websocket"
)

// Route is one row of the route table.
type Route struct {
	Method       string  // GET (which answers HEAD too, but on a stream: TakesHead), POST or DELETE; "" for every method (the 404)
	Path         string  // a Path constant; {name} matches one segment
	Callers      Callers // who may call it
	Body         string  // the $defs entry of its request body; "" if it takes none (or bytes: Upload)
	Upload       bool    // its body is a file's bytes, read as the handler stores them, not read whole first
	Status       int     // the status of its success answer
	StatusAgain  int     // another success status of the same answer, if any (200: an endpoint already subscribed)
	Answer       string  // the $defs entry of that answer; "" if it has none (the 410)
	AnswerV2     string  // the $defs entry of the answer with ?v=2, if it has its own
	Stream       string  // StreamSSE or StreamWebSocket: it opens a stream (v=1 and v=2 alike) and authenticates itself (tickets too)
	PHP          bool    // also served with a .php suffix (Part 1)
	CORS         bool    // pages of the allowed origins may call it
	Participants bool    // it needs a store that keeps participants (else 404)
	Ticket       bool    // the gate also takes a ticket (?ticket=, Part 2's): a browser's <img> cannot send headers
	AnyMethod    bool    // every method gets its handler (the 410)
	Private      bool    // left off the main listener when metrics are private (--metrics-addr)
	Mount        Mount
}

// Key names a route: its method and path ("* /api/" for every method).
// The transport binds handlers by it; x-routes is keyed by it.
func (r Route) Key() string {
	m := r.Method
	if m == "" {
		m = "*"
	}
	return m + " " + r.Path
}

// TakesHead reports whether the route answers HEAD as its GET: a GET
// route that is no stream. A stream is a body (HEAD would open one whose
// writes are discarded, which would never notice its client leave), and
// so is MCP's GET, which opens its session's event stream.
func (r Route) TakesHead() bool { return r.Method == "GET" && r.Stream == "" && r.Path != PathMCP }

// Gated reports whether the transport's gate authenticates a request of
// the route before its handler (a stream authenticates itself).
func (r Route) Gated() bool { return r.Callers != Anyone && r.Stream == "" }

// Routes lists every route, in the order the API documents them.
func Routes() []Route { return slices.Clone(routeTable) }

var routeTable = []Route{
	{Method: "POST", Path: PathPost, Callers: Writers, Body: "post.body", Status: 201, Answer: "post.answer", PHP: true, CORS: true},
	{Method: "GET", Path: PathPoll, Callers: Members, Status: 200, Answer: "poll.answer", AnswerV2: "poll.v2.answer", PHP: true, CORS: true},
	{Method: "POST", Path: PathTicket, Callers: Members, Body: "ticket.body", Status: 201, Answer: "ticket.answer", CORS: true},
	{Method: "POST", Path: PathRespond, Callers: Owners, Body: "respond.body", Status: 200, Answer: "respond.answer", CORS: true},
	{Method: "POST", Path: PathReact, Callers: Writers, Body: "react.body", Status: 200, Answer: "react.answer", CORS: true},
	{Method: "POST", Path: PathParticipants, Callers: Owners, Body: "participant.invite.body", Status: 201, Answer: "participant.invite.answer", CORS: true, Participants: true},
	{Method: "GET", Path: PathParticipants, Callers: Owners, Status: 200, Answer: "participants.answer", CORS: true, Participants: true},
	{Method: "DELETE", Path: PathParticipant, Callers: Owners, Status: 200, Answer: "participant.revoke.answer", CORS: true, Participants: true},
	{Method: "GET", Path: PathAudit, Callers: Owners, Status: 200, Answer: "audit.answer", CORS: true, Participants: true},
	{Method: "POST", Path: PathAttachments, Callers: Writers, Upload: true, Status: 201, Answer: "attachment.answer", CORS: true},
	{Method: "GET", Path: PathAttachment, Callers: Members, Ticket: true, CORS: true}, // 200: the bytes (no JSON answer)
	{Method: "GET", Path: PathWhoami, Callers: Members, Status: 200, Answer: "whoami.answer", CORS: true},
	{Method: "POST", Path: PathDevices, Callers: CallerOwner, Body: "device.issue.body", Status: 201, Answer: "device.issue.answer", CORS: true, Participants: true},
	{Method: "GET", Path: PathDevices, Callers: Owners, Status: 200, Answer: "devices.answer", CORS: true, Participants: true},
	{Method: "DELETE", Path: PathDevice, Callers: Owners, Status: 200, Answer: "device.revoke.answer", CORS: true, Participants: true},
	{Method: "GET", Path: PathSSE, Callers: Members, Stream: StreamSSE, CORS: true},
	{Method: "GET", Path: PathWS, Callers: Members, Stream: StreamWebSocket},
	{Method: "GET", Path: PathSchema, Callers: Anyone, Status: 200, Answer: "schema.answer", CORS: true},
	{Method: "GET", Path: PathLimits, Callers: Anyone, Status: 200, Answer: "limits.answer", CORS: true},
	{Method: "GET", Path: PathPushKey, Callers: Anyone, Status: 200, Answer: "push.key.answer", CORS: true},
	{Method: "POST", Path: PathPush, Callers: Members, Body: "push.subscribe.body", Status: 201, StatusAgain: 200, Answer: "push.subscribe.answer", CORS: true},
	{Method: "GET", Path: PathPush, Callers: Members, Status: 200, Answer: "push.list.answer", CORS: true},
	{Method: "DELETE", Path: PathPushOne, Callers: Members, Status: 200, Answer: "push.unsubscribe.answer", CORS: true},
	{Method: "POST", Path: PathRetired, Callers: Anyone, PHP: true, AnyMethod: true},
	{Method: "", Path: PathAPI, Callers: Anyone},
	{Method: "GET", Path: PathPage, Callers: Anyone, Mount: MountPage},
	{Method: "GET", Path: PathHealthz, Callers: Anyone, Mount: MountOps},
	{Method: "GET", Path: PathReadyz, Callers: Anyone, Mount: MountOps},
	{Method: "GET", Path: PathMetrics, Callers: Anyone, Mount: MountOps, Private: true},
	// MCP over HTTP authenticates itself (an agent key: Bearer cha_…).
	{Method: "POST", Path: PathMCP, Callers: Anyone},
	{Method: "GET", Path: PathMCP, Callers: Anyone},
	{Method: "DELETE", Path: PathMCP, Callers: Anyone},
}

// Documented reports whether the bundle's x-routes describes the route:
// every route of the API but the 404.
func (r Route) Documented() bool {
	return r.Mount == MountAPI && r.Method != "" && strings.HasPrefix(r.Path, PathAPI)
}
