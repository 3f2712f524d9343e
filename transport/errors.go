package transport

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/chatrelay/chatrelay/hub"
)

// statusOf is the only place where an error code meets an HTTP status.
var statusOf = map[hub.Code]int{
	hub.InvalidJSON:      http.StatusBadRequest,
	hub.InvalidText:      http.StatusBadRequest,
	hub.InvalidKind:      http.StatusBadRequest,
	hub.InvalidSince:     http.StatusBadRequest,
	hub.Unauthorized:     http.StatusUnauthorized,
	hub.MethodNotAllowed: http.StatusMethodNotAllowed,
	hub.Gone:             http.StatusGone,
	hub.BodyTooLarge:     http.StatusRequestEntityTooLarge,
	hub.TextTooLong:      http.StatusRequestEntityTooLarge,
	hub.RateLimited:      http.StatusTooManyRequests,
	hub.ThreadLimit:      http.StatusInsufficientStorage,
	hub.TooManyStreams:   http.StatusTooManyRequests,
	hub.InvalidTicket:    http.StatusUnauthorized,
	hub.ThreadUnreadable: http.StatusServiceUnavailable,
	hub.StoreUnavailable: http.StatusServiceUnavailable,
	hub.NotFound:         http.StatusNotFound,
	hub.InvalidThread:    http.StatusBadRequest,
	hub.Internal:         http.StatusInternalServerError,
}

// errorBody is the contract's error shape; extra fields follow the four.
type errorBody struct {
	Success      bool     `json:"success"`
	Error        string   `json:"error"`
	Code         hub.Code `json:"code"`
	Retryable    bool     `json:"retryable"`
	RetryAfterMS *int64   `json:"retry_after_ms,omitempty"`
	See          string   `json:"see,omitempty"`
}

// errorOf turns any error into the body a client is shown. A foreign error
// becomes "internal error": its text never reaches a client.
func errorOf(err error) (*hub.Error, errorBody) {
	var e *hub.Error
	if !errors.As(err, &e) {
		e = &hub.Error{Code: hub.Internal, Message: "internal error", Err: err}
	}
	msg := e.Message
	if e.Code == hub.Internal {
		msg = "internal error"
	}
	body := errorBody{Error: msg, Code: e.Code, Retryable: e.Code.Retryable()}
	if e.Code == hub.RateLimited {
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
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", err)
	}
	noteRefused(r, e.Code)
	if e.Code.Retryable() && e.Retry > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.Retry+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, status, body)
}
