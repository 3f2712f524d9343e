package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/chatrelay/chatrelay"
)

// statusOf is each code's HTTP status, from the code table
// (chatrelay.CodeTable): the one place a code meets a status.
var statusOf = func() map[chatrelay.Code]int {
	m := make(map[chatrelay.Code]int)
	for _, c := range chatrelay.CodeTable() {
		m[c.Code] = c.Status
	}
	return m
}()

// errorBody is the contract's error shape; extra fields follow the four.
type errorBody struct {
	Success      bool           `json:"success"`
	Error        string         `json:"error"`
	Code         chatrelay.Code `json:"code"`
	Retryable    bool           `json:"retryable"`
	RetryAfterMS *int64         `json:"retry_after_ms,omitempty"`
	See          string         `json:"see,omitempty"`
	// Message is the v2 message the error is about, in its current state
	// (a 409 interaction_closed, client_id_conflict or too_many_reactions),
	// as the asker's view shows it.
	Message json.RawMessage `json:"message,omitempty"`
}

// quoteID quotes an id a client sent, for an error's words: whole if it
// is at most maxLogValue bytes, else by its length only. No id is that
// long, and a cut could end inside a secret's shape, which is then no
// longer one: a participant's view (errorOf) would not redact it.
func quoteID(id string) string {
	if len(id) > maxLogValue {
		return fmt.Sprintf("(an id of %d bytes)", len(id))
	}
	return strconv.Quote(id)
}

// errorOf turns any error into the body a client of view v is shown. A
// foreign error becomes "internal error": its text never reaches a client.
// The message a refusal is about is shown as v shows a message: a
// participant's is redacted and has no client_id (contract Part 3: every
// answer, errors included).
func errorOf(err error, v view) (*chatrelay.Error, errorBody) {
	var e *chatrelay.Error
	if !errors.As(err, &e) {
		e = &chatrelay.Error{Code: chatrelay.Internal, Message: "internal error", Err: err}
	}
	msg := e.Message
	if e.Code == chatrelay.Internal {
		msg = "internal error"
	}
	if v.redact {
		// The words may quote what the client sent (an id, an event's
		// name): a participant's view shows them as it shows every
		// string, redacted. The server's own words have no secret shape.
		msg = chatrelay.Redact(msg)
	}
	body := errorBody{Error: msg, Code: e.Code, Retryable: e.Code.Retryable(), Message: v.about(e.About)}
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
	e, body := errorOf(err, errorView(r))
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	switch {
	case e.Code == chatrelay.ThreadLimit: // the server is full, not failing: every refused creation says so
		s.log.Warn("thread limit reached: a new thread was refused", "method", clip(r.Method), "path", logPath(r.URL.Path), "code", e.Code)
	case status >= 500:
		s.log.Error("request failed", "method", clip(r.Method), "path", logPath(r.URL.Path), "code", e.Code, "err", err)
	}
	noteRefused(r, e.Code)
	if e.Code.Retryable() && e.Retry > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.Retry+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, status, body)
}

// about is the v2 JSON of the message a refusal is about (as the store
// gave it, the owner's view) as v shows it. A participant's view redacts
// it and drops its client_id; if it cannot be read, the refusal carries
// no message rather than the owner's.
func (v view) about(js []byte) json.RawMessage {
	if js == nil || !v.redact {
		return js
	}
	var m chatrelay.Message
	if json.Unmarshal(js, &m) != nil {
		return nil
	}
	r, _ := chatrelay.RedactMessage(m)
	return chatrelay.MarshalMessageV2(r)
}

// principalKey is the request context key of the principal gate let in,
// for a request served without observe's reqInfo.
type principalKey struct{}

// withPrincipal is r knowing its principal, for the view of its refusals:
// noted in the request's reqInfo (no copy of the request and its context
// per request), or, served without one, in its context.
func withPrincipal(r *http.Request, p principal) *http.Request {
	if ri := infoOf(r); ri != nil {
		ri.principal, ri.gated = p, true
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// errorView is the view a request's refusals are shown in: the owner's
// only for a request gate let in as the owner; any other (a participant,
// or one not authenticated yet) is shown a participant's view.
func errorView(r *http.Request) view {
	p, ok := r.Context().Value(principalKey{}).(principal)
	if ri := infoOf(r); ri != nil && ri.gated {
		p, ok = ri.principal, true
	}
	if ok && !p.participant() {
		return view{v2: true}
	}
	return view{v2: true, redact: true}
}
