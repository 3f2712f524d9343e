package chatrelay

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Code is a machine-readable error code. The codes are the contract's: new
// ones are appended, existing ones are never renamed. The code table states
// each one's HTTP status; only the transport writes it (or a WebSocket
// frame, or a CLI exit).
type Code string

// Error codes of contract Part 1 and Part 2, then chatrelay's own. What
// each means, its HTTP status and whether it may be retried are in the
// code table below.
const (
	InvalidJSON      Code = "invalid_json"
	InvalidText      Code = "invalid_text"
	InvalidKind      Code = "invalid_kind"
	InvalidSince     Code = "invalid_since"
	Unauthorized     Code = "unauthorized"
	MethodNotAllowed Code = "method_not_allowed"
	Gone             Code = "gone"
	BodyTooLarge     Code = "body_too_large"
	TextTooLong      Code = "text_too_long"
	RateLimited      Code = "rate_limited"
	ThreadLimit      Code = "thread_limit"

	TooManyStreams   Code = "too_many_streams"
	InvalidTicket    Code = "invalid_ticket"
	ThreadUnreadable Code = "thread_unreadable"
	StoreUnavailable Code = "store_unavailable"

	NotFound      Code = "not_found"
	InvalidThread Code = "invalid_thread"
	Internal      Code = "internal"

	// Refusals of a WebSocket handshake, answered before any upgrade.
	OriginNotAllowed Code = "origin_not_allowed"
	UpgradeRequired  Code = "upgrade_required"
	InvalidHandshake Code = "invalid_handshake"

	// Part 4 (v2).
	InvalidVersion    Code = "invalid_version"
	InvalidAnswer     Code = "invalid_answer"
	InvalidEmoji      Code = "invalid_emoji"
	InvalidClientID   Code = "invalid_client_id"
	InteractionClosed Code = "interaction_closed"
	ClientIDConflict  Code = "client_id_conflict"
	// Part 3 (participants).
	InvalidName            Code = "invalid_name"
	InvalidRole            Code = "invalid_role"
	InvalidExpiry          Code = "invalid_expiry"
	InvalidCap             Code = "invalid_cap"
	TokenRevoked           Code = "token_revoked"
	TokenExpired           Code = "token_expired"
	NotPermitted           Code = "not_permitted"
	ParticipantLimit       Code = "participant_limit"
	TooManyMessages        Code = "too_many_messages"
	CapReached             Code = "cap_reached"
	ParticipantsUnreadable Code = "participants_unreadable"
	// chatrelay's own, for what the host (CLI, MCP) sends.
	InvalidInteraction Code = "invalid_interaction"
	InvalidCard        Code = "invalid_card"
	// chatrelay's own, where the contract is silent.
	TooManyReactions Code = "too_many_reactions"
	// Part 5 (attachments).
	AttachmentTooLarge Code = "attachment_too_large"
	TooManyAttachments Code = "too_many_attachments"
	InvalidAttachment  Code = "invalid_attachment"
	// chatrelay's own: a download's Range no byte of the file satisfies.
	RangeNotSatisfiable Code = "range_not_satisfiable"
	// Part 5 (devices).
	DeviceLimit Code = "device_limit"
	// Part 5 (Web Push).
	InvalidPushEndpoint Code = "invalid_push_endpoint"
	PushLimit           Code = "push_limit"
	PushDisabled        Code = "push_disabled"
	// Part 5 (agent keys).
	AgentLimit Code = "agent_limit"
	// A request whose body did not arrive in time (chatrelay's own).
	RequestTimeout Code = "request_timeout"
	// What MCP's Streamable HTTP transport refuses itself (chatrelay's own).
	InvalidMCPRequest    Code = "invalid_mcp_request"
	UnsupportedMediaType Code = "unsupported_media_type"
	// chatrelay's own: a download's If-Match the attachment does not match.
	PreconditionFailed Code = "precondition_failed"
)

// CodeInfo is a row of the code table: a code, the HTTP status of an
// answer that carries it (the transport writes it, the metrics count it),
// whether a client may retry the same request later, and what it means.
type CodeInfo struct {
	Code        Code
	Status      int
	Retryable   bool
	Description string
}

// codeTable is every code, in the schema enum's order; Codes, the
// statuses and Retryable are read from it. A new code is appended.
var codeTable = []CodeInfo{
	{InvalidJSON, 400, false, "the body is not a JSON object of the route's shape"},
	{InvalidText, 400, false, "a text missing, not a string, not valid UTF-8, or blank"},
	{InvalidKind, 400, false, "a kind that is not operator or agent"},
	{InvalidSince, 400, false, "a cursor (since, Last-Event-ID) that is not a non-negative integer"},
	{Unauthorized, 401, false, "credentials missing, malformed or unknown"},
	{MethodNotAllowed, 405, false, "a method the route does not take (Allow names those it takes)"},
	{Gone, 410, false, "the retired route"},
	{BodyTooLarge, 413, false, "a body past its limit"},
	{TextTooLong, 413, false, "a text past its limit: refused, never truncated"},
	{RateLimited, 429, true, "a rate window is full; retry_after_ms says how long to wait"},
	{ThreadLimit, 507, false, "the post would create a thread beyond the most the store keeps"},
	{TooManyStreams, 429, true, "the thread or the address holds the most open streams"},
	{InvalidTicket, 401, false, "a ticket that is malformed, tampered, expired, or used to post or poll; a file ticket used on anything but its own file"},
	{ThreadUnreadable, 503, false, "the thread's stored record does not parse"},
	{StoreUnavailable, 503, true, "the store cannot be reached"},
	{NotFound, 404, false, "no such route, or (CLI) no such thread"},
	{InvalidThread, 400, false, "(CLI) a thread id that is not 16 lowercase hex, or more threads than an agent key may reach"},
	{Internal, 500, false, "a failure of the server's own; its cause is logged, never sent"},
	{OriginNotAllowed, 403, false, "a browser page of an origin not allowed"},
	{UpgradeRequired, 426, false, "not a WebSocket handshake, or not version 13"},
	{InvalidHandshake, 400, false, "a malformed Sec-WebSocket-Key"},
	{InvalidVersion, 400, false, "v is neither 1 nor 2"},
	{InvalidAnswer, 400, false, "an answer that does not fit its interaction"},
	{InvalidEmoji, 400, false, "an emoji that is empty, too long or holds white space, a control or a format character"},
	{InvalidClientID, 400, false, "a client_id that does not match its pattern"},
	{InteractionClosed, 409, false, "answered, expired or canceled already"},
	{ClientIDConflict, 409, false, "the client_id names a different message"},
	{InvalidInteraction, 400, false, "an interaction hermes asks that breaks a limit"},
	{InvalidCard, 400, false, "a card that breaks a limit or has a link that is not http(s)"},
	{InvalidName, 400, false, "a name empty once cleaned, or an agent key's name past its limit"},
	{InvalidRole, 400, false, "a role that is not viewer or commenter"},
	{InvalidExpiry, 400, false, "expires_in out of range"},
	{InvalidCap, 400, false, "cap out of range"},
	{TokenRevoked, 401, false, "a revoked grant's token, or a ticket minted from it"},
	{TokenExpired, 401, false, "an expired grant's token, or a ticket minted from it"},
	{NotPermitted, 403, false, "a participant on an owner's route, or a viewer posting"},
	{ParticipantLimit, 409, false, "the thread has the most active grants"},
	{TooManyMessages, 429, false, "a participant's messages wait for hermes"},
	{CapReached, 429, false, "the grant's cap is spent"},
	{ParticipantsUnreadable, 503, false, "the participants record does not parse"},
	{TooManyReactions, 409, false, "a new emoji on a message that has the most distinct ones"},
	{AttachmentTooLarge, 413, false, "an upload over the size limit of one file or of the thread"},
	{TooManyAttachments, 409, false, "more attachments on one message than it may carry, or more uploads no message names yet in a thread"},
	{InvalidAttachment, 400, false, "an attachment id that is unknown, of another thread or already used; or a bad name"},
	{RangeNotSatisfiable, 416, false, "a download's Range that no byte of the attachment satisfies, or that does not parse"},
	{DeviceLimit, 409, false, "the thread has the most active devices"},
	{InvalidPushEndpoint, 400, false, "a push subscription that is not https, whose host is a private address, or not of a subscription's shape"},
	{PushLimit, 409, false, "the thread has the most push subscriptions"},
	{PushDisabled, 404, false, "push is turned off on this server (--push=false)"},
	{AgentLimit, 409, false, "the store has the most active agent keys"},
	{RequestTimeout, 408, true, "the request's body did not arrive within the server's read timeout: nothing was stored; send it again"},
	{InvalidMCPRequest, 400, false, "an MCP request its transport refuses: an Accept without application/json and text/event-stream, an MCP-Protocol-Version it does not speak, a GET or DELETE without Mcp-Session-Id, a body that is not JSON-RPC or holds more than one JSON value"},
	{UnsupportedMediaType, 415, false, "a body whose Content-Type the route does not take"},
	{PreconditionFailed, 412, false, "a download's If-Match that the attachment's ETag does not match"},
}

// CodeTable returns the code table: every code with its status, whether
// it is retryable and what it means, in Codes' order.
func CodeTable() []CodeInfo { return slices.Clone(codeTable) }

// Codes lists every code, in the table's order: the schema's enum of codes.
func Codes() []Code {
	out := make([]Code, len(codeTable))
	for i, c := range codeTable {
		out[i] = c.Code
	}
	return out
}

// Error is a domain error: a code, words safe to show a client, and the cause,
// which is logged and never sent.
type Error struct {
	Code    Code
	Message string        // safe to show a client
	Retry   time.Duration // how long to wait, for retryable codes
	Err     error         // the cause; may be nil
	// About is the v2 JSON of the message the error is about, sent with
	// it as "message" (a 409 interaction_closed carries the current state).
	About []byte
}

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of the first *Error in err's chain, or Internal for
// any other non-nil error, or "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Retryable reports whether a client may retry the same request later.
func (c Code) Retryable() bool { return retryable[c] }

var retryable = func() map[Code]bool {
	m := map[Code]bool{}
	for _, c := range codeTable {
		if c.Retryable {
			m[c.Code] = true
		}
	}
	return m
}()
