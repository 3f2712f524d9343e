package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/store"
)

// MCP over HTTP (contract Part 5, "MCP from anywhere"): the transport
// checks what is HTTP's (the Origin, the agent key, the statuses of a
// refusal) and hands the request on to the MCP server (mcpserver.HTTP).

// MCPHandler serves MCP requests made with an agent key.
type MCPHandler interface {
	// ServeAgent serves a request made with the active key k; an error
	// means it wrote nothing, and the transport answers the error.
	ServeAgent(w http.ResponseWriter, r *http.Request, k chatrelay.AgentKey) error
	// Close ends every session; Shutdown calls it.
	Close()
}

// handleMCP answers <prefix>/mcp. An Origin (a browser page) must be one
// of the allowed origins, never merely the Host's own, which a DNS
// rebinding page would match: else 403 origin_not_allowed. A missing,
// unknown or revoked key is 401 with WWW-Authenticate: Bearer (a store that
// cannot be read is 503, without it). The request
// may then last as long as its wait (a tool call's answer comes on the
// POST's own event stream): the server's read and write timeouts are
// lifted for it.
func (s *Server) handleMCP(w http.ResponseWriter, r *http.Request) {
	agents, ok := s.cfg.Store.(store.Agents) // the backend's own store: s.store is metered
	if s.cfg.MCP == nil || !ok {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.NotFound, "this server does not serve MCP: start it with serve --mcp"))
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o, "") {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.OriginNotAllowed, "a page of this origin may not use MCP: name it with --allowed-origin"))
		return
	}
	k, err := s.agentKey(r, agents)
	if err != nil {
		if statusOf[chatrelay.CodeOf(err)] == http.StatusUnauthorized { // not when the store is down: 503
			w.Header().Set("WWW-Authenticate", `Bearer realm="chatrelay"`)
		}
		s.writeError(w, r, err)
		return
	}
	// An active agent key is the owner's (chatrelay agent add): its
	// refusals show their words as the owner's view does, as its tool
	// results do; the words may quote what it sent (the SDK's
	// "malformed Last-Event-ID").
	r = withPrincipal(r, principal{role: chatrelay.Owner, ctx: context.Background()})
	if r.Method == http.MethodPost {
		// The body is read here, under the server's read timeout, and
		// its limit answered as the API's error with its code (the SDK
		// answers plain text, which no client tells from another failure).
		data, err := readMCPBody(w, r)
		if err == nil {
			err = checkMCPBody(data, r.Header.Get("Mcp-Session-Id") != "")
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	// open_thread's claim link starts as a share link does: --public-url,
	// else the address the agent reached the server at.
	r = r.WithContext(host.WithLinkBase(r.Context(), s.publicBase(r)))
	sw := &sdkRefusals{ResponseWriter: w}
	if err := s.cfg.MCP.ServeAgent(sw, r, k); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := sw.refusal(); err != nil {
		s.writeError(w, r, err)
	}
}

// sdkRefusals is the response writer of an MCP request: a refusal the
// MCP SDK writes itself, as plain text (http.Error: a session it does not
// know, an Accept or a Content-Type it does not take, ...), is held back
// and answered by handleMCP as the API's error, with a machine code, at
// the SDK's status; anything else passes through.
type sdkRefusals struct {
	http.ResponseWriter
	status int          // the refusal held back (0: none)
	text   bytes.Buffer // its words, the first 256 bytes
	sent   bool         // an answer began: everything passes through
}

func (w *sdkRefusals) WriteHeader(status int) {
	if !w.sent && w.status == 0 && status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	if w.status == 0 {
		w.sent = true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *sdkRefusals) Write(b []byte) (int, error) {
	if w.status != 0 {
		w.text.Write(b[:min(len(b), max(0, 256-w.text.Len()))])
		return len(b), nil
	}
	w.sent = true
	return w.ResponseWriter.Write(b)
}

// Flush and Unwrap let the SDK stream its events (http.ResponseController).
func (w *sdkRefusals) Flush() {
	if w.status == 0 {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *sdkRefusals) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refusal is the refusal held back as the API's error (nil: none), its
// code the one of the SDK's status: a session it does not know 404
// not_found, one made with another key 403 not_permitted, a body past
// its limit 413 body_too_large, a Content-Type 415
// unsupported_media_type, a failure of its own 500 internal; any other
// refusal (400, and a 409 for a stream id in use) 400
// invalid_mcp_request.
func (w *sdkRefusals) refusal() error {
	if w.status == 0 {
		return nil
	}
	text := strings.TrimSpace(strings.ToValidUTF8(w.text.String(), ""))
	code := chatrelay.InvalidMCPRequest
	switch {
	case w.status == http.StatusNotFound:
		code = chatrelay.NotFound
	case w.status == http.StatusForbidden:
		code = chatrelay.NotPermitted
	case w.status == http.StatusMethodNotAllowed:
		code = chatrelay.MethodNotAllowed
	case w.status == http.StatusRequestEntityTooLarge:
		code = chatrelay.BodyTooLarge
	case w.status == http.StatusUnsupportedMediaType:
		code = chatrelay.UnsupportedMediaType
	case w.status >= 500:
		return &chatrelay.Error{Code: chatrelay.Internal, Err: fmt.Errorf("mcp: %d %s", w.status, text)}
	}
	return &chatrelay.Error{Code: code, Message: "MCP: " + text}
}

// agentKey is the active agent key of "Authorization: Bearer cha_…", the
// request's only Authorization header.
func (s *Server) agentKey(r *http.Request, agents store.Agents) (chatrelay.AgentKey, error) {
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	key = strings.TrimLeft(key, " ")
	if !strings.EqualFold(scheme, "Bearer") || !chatrelay.ValidAgentKey(key) {
		return chatrelay.AgentKey{}, chatrelay.Errorf(chatrelay.Unauthorized, "MCP needs an agent key (chatrelay agent add), sent as a Bearer credential in the Authorization header")
	}
	if len(r.Header.Values("Authorization")) > 1 { // as every route: a proxy may read the other one
		return chatrelay.AgentKey{}, chatrelay.Errorf(chatrelay.Unauthorized, "MCP takes one Authorization header, not two")
	}
	k, err := agents.ResolveAgent(r.Context(), chatrelay.DigestOf(key))
	if err != nil {
		return k, err
	}
	if !k.Active() {
		return k, chatrelay.Errorf(chatrelay.TokenRevoked, "this agent key was revoked")
	}
	return k, nil
}

// readMCPBody reads a POST's body, at most chatrelay.MaxMCPBody bytes, and
// gives it back to r for the MCP server to read: past the limit is 413
// body_too_large.
func readMCPBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooBig := chatrelay.Errorf(chatrelay.BodyTooLarge, "an MCP request body is at most %d bytes (a tool call's files, base64, included)", chatrelay.MaxMCPBody)
	if r.ContentLength > chatrelay.MaxMCPBody {
		return nil, tooBig
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, chatrelay.MaxMCPBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooBig
	}
	if errors.Is(err, errShuttingDown) { // cut by Shutdown's abort (cutAtAbort)
		return nil, errShuttingDown
	}
	if err != nil {
		return nil, chatrelay.Errorf(chatrelay.InvalidJSON, "the body could not be read")
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	return data, nil
}

// checkMCPBody refuses a body of more than one JSON value (oneValue) and
// a message sent in or out of a session that should not be
// (initializeOnce), in one decode of a body that is a message or a batch
// (the common case: a decode that takes the whole body found one value),
// and oneValue's own only for a body that is neither.
func checkMCPBody(data []byte, inSession bool) error {
	ms, ok := mcpMessages(data)
	if !ok {
		return oneValue(data)
	}
	return initializeOnce(ms, inSession)
}

// mcpMessage is what initializeOnce reads of a JSON-RPC message.
type mcpMessage struct {
	ID     json.RawMessage `json:"id"`
	Method *string         `json:"method"`
}

// mcpMessages decodes data, a message or a batch, as the SDK does (keys
// in their own case), and reports whether it did: false for a body that
// is neither, does not decode, or has more than white space after its
// value.
func mcpMessages(data []byte) ([]mcpMessage, bool) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return nil, false
	case trimmed[0] == '{':
		var m mcpMessage
		if chatrelay.UnmarshalExactCase(data, &m) != nil {
			return nil, false
		}
		return []mcpMessage{m}, true
	case trimmed[0] == '[':
		var ms []mcpMessage
		if chatrelay.UnmarshalExactCase(data, &ms) != nil {
			return nil, false
		}
		return ms, true
	}
	return nil, false
}

// oneValue refuses a body whose JSON value (a message, or a batch) is
// followed by more than white space: the SDK answered the first message
// and dropped the rest unsaid, where stdio refuses a line with two values.
// A body whose first value does not parse is left to the SDK.
func oneValue(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	var v json.RawMessage
	if d.Decode(&v) != nil {
		return nil
	}
	if _, err := d.Token(); err != io.EOF {
		return chatrelay.Errorf(chatrelay.InvalidMCPRequest, "the body holds more than one JSON value: send one message (or one batch) a request")
	}
	return nil
}

// initializeOnce refuses a message sent without Mcp-Session-Id that is
// not an initialize request, and one sent in a session (inSession) that
// is: the SDK answered either 200 with a JSON-RPC error of code 0 (MCP's
// transport asks for 400) and logged the request at error level, which
// let any key holder fill the log (without a session it also made and
// dropped one). It refuses an id that is not a string or an integer the
// SDK keeps exactly (|id| ≤ 2^53), as chatrelay mcp does on stdio: the SDK
// answered 1.5 as 1, another request's id. A batch (a JSON array, MCP
// 2025-03-26) is judged by whether it holds an initialize request, and by
// each of its ids. ms are the body's messages (mcpMessages); a body that
// does not parse is left to the SDK, which answers it as MCP says.
func initializeOnce(ms []mcpMessage, inSession bool) error {
	initialize := false
	for _, m := range ms {
		if m.Method != nil && *m.Method == "initialize" {
			initialize = true
		}
		if !validID(m.ID) {
			return chatrelay.Errorf(chatrelay.InvalidJSON, "a JSON-RPC id is a string or an integer (of at most 2^53)")
		}
	}
	switch {
	case inSession && initialize:
		return chatrelay.Errorf(chatrelay.InvalidJSON, "this session is initialized: an initialize request starts a new session, sent without Mcp-Session-Id")
	case !inSession && !initialize:
		return chatrelay.Errorf(chatrelay.InvalidJSON, "a request without Mcp-Session-Id must be an initialize request: start a session first (its answer's Mcp-Session-Id header names it)")
	}
	return nil
}

// validID says whether a message's id (nil: none; null is left to the
// SDK, which refuses it on a request) is a string or an integer of at
// most 2^53, which the SDK's float64 holds exactly.
func validID(raw json.RawMessage) bool {
	if len(raw) == 0 || raw[0] == '"' || string(raw) == "null" {
		return true
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && n <= 1<<53 && n >= -(1<<53)
}
