package chatrelay

import (
	"errors"
	"fmt"
	"time"
)

// Code is a machine-readable error code. The codes are the contract's: new
// ones are appended, existing ones are never renamed. Only the transport maps
// a code to an HTTP status (or a WebSocket frame, or a CLI exit).
type Code string

// Error codes of contract Part 1 and Part 2, then chatrelay's own.
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

	NotFound      Code = "not_found"      // no such route, or (CLI) no such thread
	InvalidThread Code = "invalid_thread" // (CLI) a thread id that is not 16 lowercase hex
	Internal      Code = "internal"

	// Refusals of a WebSocket handshake, answered before any upgrade.
	OriginNotAllowed Code = "origin_not_allowed" // a browser page of an origin not allowed
	UpgradeRequired  Code = "upgrade_required"   // not a WebSocket handshake, or not version 13
	InvalidHandshake Code = "invalid_handshake"  // a malformed Sec-WebSocket-Key

	// Part 4 (v2).
	InvalidVersion    Code = "invalid_version"    // v is neither 1 nor 2
	InvalidAnswer     Code = "invalid_answer"     // an answer that does not fit its interaction
	InvalidEmoji      Code = "invalid_emoji"      // an emoji that is empty, too long or holds white space, a control or a format character
	InvalidClientID   Code = "invalid_client_id"  // a client_id that does not match its pattern
	InteractionClosed Code = "interaction_closed" // answered, expired or canceled already
	ClientIDConflict  Code = "client_id_conflict" // the client_id names a different message
	// Part 3 (participants).
	InvalidName            Code = "invalid_name"            // a name empty once cleaned
	InvalidRole            Code = "invalid_role"            // a role that is not viewer or commenter
	InvalidExpiry          Code = "invalid_expiry"          // expires_in out of range
	InvalidCap             Code = "invalid_cap"             // cap out of range
	TokenRevoked           Code = "token_revoked"           // a revoked grant's token, or a ticket minted from it
	TokenExpired           Code = "token_expired"           // an expired grant's token, or a ticket minted from it
	NotPermitted           Code = "not_permitted"           // a participant on an owner's route, or a viewer posting
	ParticipantLimit       Code = "participant_limit"       // the thread has the most active grants
	TooManyMessages        Code = "too_many_messages"       // a participant's messages wait for hermes
	CapReached             Code = "cap_reached"             // the grant's cap is spent
	ParticipantsUnreadable Code = "participants_unreadable" // the participants record does not parse
	// chatrelay's own, for what the host (CLI, MCP) sends.
	InvalidInteraction Code = "invalid_interaction" // an interaction hermes asks that breaks a limit
	InvalidCard        Code = "invalid_card"        // a card that breaks a limit or has a link that is not http(s)
	// chatrelay's own, where the contract is silent.
	TooManyReactions Code = "too_many_reactions" // a new emoji on a message that has the most distinct ones

)

// Codes lists every code, in the order above: the schema's enum of codes.
func Codes() []Code {
	return []Code{
		InvalidJSON, InvalidText, InvalidKind, InvalidSince, Unauthorized, MethodNotAllowed, Gone,
		BodyTooLarge, TextTooLong, RateLimited, ThreadLimit,
		TooManyStreams, InvalidTicket, ThreadUnreadable, StoreUnavailable,
		NotFound, InvalidThread, Internal,
		OriginNotAllowed, UpgradeRequired, InvalidHandshake,
		InvalidVersion, InvalidAnswer, InvalidEmoji, InvalidClientID, InteractionClosed, ClientIDConflict,
		InvalidInteraction, InvalidCard,
		InvalidName, InvalidRole, InvalidExpiry, InvalidCap, TokenRevoked, TokenExpired, NotPermitted,
		ParticipantLimit, TooManyMessages, CapReached, ParticipantsUnreadable,
		TooManyReactions,
	}
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
func (c Code) Retryable() bool {
	return c == RateLimited || c == TooManyStreams || c == StoreUnavailable
}
