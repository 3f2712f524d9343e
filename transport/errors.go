package transport

import (
	"encoding/json"

	"github.com/chatrelay/chatrelay"

	"errors"
	"net/http"
	"strconv"
	"time"
)

// statusOf is the only place where an error code meets an HTTP status.
var statusOf = map[chatrelay.Code]int{
	chatrelay.InvalidJSON:      http.StatusBadRequest,
	chatrelay.InvalidText:      http.StatusBadRequest,
	chatrelay.InvalidKind:      http.StatusBadRequest,
	chatrelay.InvalidSince:     http.StatusBadRequest,
	chatrelay.Unauthorized:     http.StatusUnauthorized,
	chatrelay.MethodNotAllowed: http.StatusMethodNotAllowed,
	chatrelay.Gone:             http.StatusGone,
	chatrelay.BodyTooLarge:     http.StatusRequestEntityTooLarge,
	chatrelay.TextTooLong:      http.StatusRequestEntityTooLarge,
	chatrelay.RateLimited:      http.StatusTooManyRequests,
	chatrelay.ThreadLimit:      http.StatusInsufficientStorage,
	chatrelay.TooManyStreams:   http.StatusTooManyRequests,
	chatrelay.InvalidTicket:    http.StatusUnauthorized,
	chatrelay.ThreadUnreadable: http.StatusServiceUnavailable,
	chatrelay.StoreUnavailable: http.StatusServiceUnavailable,
	chatrelay.NotFound:         http.StatusNotFound,
	chatrelay.InvalidThread:    http.StatusBadRequest,
	chatrelay.Internal:         http.StatusInternalServerError,
	chatrelay.OriginNotAllowed: http.StatusForbidden,
	chatrelay.UpgradeRequired:  http.StatusUpgradeRequired,
	chatrelay.InvalidHandshake: http.StatusBadRequest,

	chatrelay.InvalidVersion:     http.StatusBadRequest,
	chatrelay.InvalidAnswer:      http.StatusBadRequest,
	chatrelay.InvalidEmoji:       http.StatusBadRequest,
	chatrelay.InvalidClientID:    http.StatusBadRequest,
	chatrelay.InteractionClosed:  http.StatusConflict,
	chatrelay.ClientIDConflict:   http.StatusConflict,
	chatrelay.TooManyReactions:   http.StatusConflict,
	chatrelay.InvalidInteraction: http.StatusBadRequest,
	chatrelay.InvalidCard:        http.StatusBadRequest,

	chatrelay.InvalidName:            http.StatusBadRequest,
	chatrelay.InvalidRole:            http.StatusBadRequest,
	chatrelay.InvalidExpiry:          http.StatusBadRequest,
	chatrelay.InvalidCap:             http.StatusBadRequest,
	chatrelay.TokenRevoked:           http.StatusUnauthorized,
	chatrelay.TokenExpired:           http.StatusUnauthorized,
	chatrelay.NotPermitted:           http.StatusForbidden,
	chatrelay.ParticipantLimit:       http.StatusConflict,
	chatrelay.TooManyMessages:        http.StatusTooManyRequests,
	chatrelay.CapReached:             http.StatusTooManyRequests,
	chatrelay.ParticipantsUnreadable: http.StatusServiceUnavailable,
}

// errorBody is the contract's error shape; extra fields follow the four.
type errorBody struct {
	Success      bool           `json:"success"`
	Error        string         `json:"error"`
	Code         chatrelay.Code `json:"code"`
	Retryable    bool           `json:"retryable"`
	RetryAfterMS *int64         `json:"retry_after_ms,omitempty"`
	See          string         `json:"see,omitempty"`
	// Message is the v2 message the error is about, in its current state
	// (a 409 interaction_closed or client_id_conflict).
	Message json.RawMessage `json:"message,omitempty"`
}

// errorOf turns any error into the body a client is shown. A foreign error
// becomes "internal error": its text never reaches a client.
func errorOf(err error) (*chatrelay.Error, errorBody) {
	var e *chatrelay.Error
	if !errors.As(err, &e) {
		e = &chatrelay.Error{Code: chatrelay.Internal, Message: "internal error", Err: err}
	}
	msg := e.Message
	if e.Code == chatrelay.Internal {
		msg = "internal error"
	}
	body := errorBody{Error: msg, Code: e.Code, Retryable: e.Code.Retryable(), Message: e.About}
	if e.Code == chatrelay.RateLimited {
		ms := max(e.Retry.Milliseconds(), 1)
		body.RetryAfterMS = &ms
	}
	return e, body
}

// writeError answers a refused request. It logs server-side failures with
// their cause; the request log (accesslog.go) logs refusals at info with
// the code (never a token or a text) and counts them.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e, body := errorOf(err)
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if status >= 500 {
		s.log.Error("request failed", "method", clip(r.Method), "path", clip(r.URL.Path), "code", e.Code, "err", err)
	}
	noteRefused(r, e.Code)
	if e.Code.Retryable() && e.Retry > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.Retry+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, status, body)
}
