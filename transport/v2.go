package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The v2 routes (contract Part 4): answering an interaction, reacting.

// messageAnswer is the 200 of respond and react.
type messageAnswer struct {
	Success bool            `json:"success"`
	Message json.RawMessage `json:"message"` // the v2 message, in its current state
}

// respondBody is the body of POST /api/chat/respond.
type respondBody struct {
	InteractionID *string `json:"interaction_id"`
	Decision      *string `json:"decision"`
	// Value is kept as sent, to be checked before it is decoded (a
	// decoder would quietly turn invalid UTF-8 and a lone surrogate
	// escape into U+FFFD, changing the person's answer).
	Value *json.RawMessage `json:"value"`
}

// answer checks a respond body: the interaction it names and the answer,
// a decision or a value (the interaction's type decides which, later).
func (body respondBody) answer() (chatrelay.Answer, string, error) {
	var ans chatrelay.Answer
	if body.InteractionID == nil {
		return ans, "", chatrelay.Errorf(chatrelay.InvalidJSON, `the body names the interaction: {"interaction_id": "ix_…", "decision" or "value"}`)
	}
	id := *body.InteractionID
	if !chatrelay.InteractionIDPattern.MatchString(id) {
		return ans, "", chatrelay.Errorf(chatrelay.NotFound, "no interaction %s in this thread", quoteID(id))
	}
	switch {
	case body.Decision != nil && body.Value != nil:
		return ans, "", chatrelay.Errorf(chatrelay.InvalidAnswer, "an answer is a decision or a value, not both")
	case body.Decision != nil:
		ans.Decision = *body.Decision
	case body.Value != nil:
		raw := *body.Value
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &ans.Value) != nil {
			return ans, "", chatrelay.Errorf(chatrelay.InvalidJSON, "the body's fields have the wrong types: value must be a string")
		}
		if !chatrelay.ValidJSONText(raw) {
			return ans, "", chatrelay.Errorf(chatrelay.InvalidAnswer, "the value is not valid UTF-8 (or holds a lone UTF-16 surrogate escape)")
		}
	default:
		return ans, "", chatrelay.Errorf(chatrelay.InvalidAnswer, `an answer needs a "decision" (approval) or a "value" (input)`)
	}
	return ans, id, nil
}

// handleRespond serves POST /api/chat/respond: the owner answers an
// interaction. The first answer wins, atomically in the store; any other,
// and any after the deadline or a cancel, is 409 interaction_closed with
// the current message.
func (s *Server) handleRespond(w http.ResponseWriter, r *http.Request, who principal) {
	thread := who.thread
	var body respondBody
	if !s.decodeJSON(w, r, &body) {
		return
	}
	ans, id, err := body.answer()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := s.store.Change(r.Context(), thread, store.Change{Op: store.Respond, InteractionID: id, Answer: ans, By: chatrelay.Operator})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, messageAnswer{Success: true, Message: e.JSON2})
}

// reactBody is the body of POST /api/chat/react.
type reactBody struct {
	MessageID *string `json:"message_id"`
	Emoji     *string `json:"emoji"`
	Remove    bool    `json:"remove"`
}

// handleReact serves POST /api/chat/react: add or remove the reaction of
// the owner (as "operator") or a commenter (as "p:<id>"). Reactions have
// rate windows of their own (the posts' sizes). Only a reaction that
// changes something counts in them: one that changes nothing (re-adding
// a reaction one has, removing one one has not) answers 200 with the
// message as it is, and one refused for what it is (no such message, too
// many reactions) gets its refusal, even over a full window.
func (s *Server) handleReact(w http.ResponseWriter, r *http.Request, who principal) {
	thread := who.thread
	var body reactBody
	if !s.decodeJSON(w, r, &body) {
		return
	}
	if body.MessageID == nil || body.Emoji == nil {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.InvalidJSON, `the body is {"message_id": "MSG-…", "emoji": "👍", "remove"?: true}`))
		return
	}
	if err := chatrelay.CheckEmoji(*body.Emoji); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !chatrelay.MessageIDPattern.MatchString(*body.MessageID) {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.NotFound, "no message %s in this thread", quoteID(*body.MessageID)))
		return
	}
	c := store.Change{Op: store.React, MessageID: *body.MessageID, Emoji: *body.Emoji, By: who.author()}
	if body.Remove {
		c.Op = store.Unreact
	}
	cur, err := s.messageOf(r, thread, c.MessageID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	changes, err := store.WouldChange(cur, c, s.cfg.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !changes {
		writeJSON(w, http.StatusOK, messageAnswer{Success: true, Message: who.view(view{v2: true}).json(cur)})
		return
	}
	ip := limitKey(clientIP(r, s.cfg.Trusted))
	settle, err := s.limiter.Take(r.Context(), "react:"+thread, "react:"+ip)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := func() (e store.Entry, err error) {
		// Refused, or nothing changed after all (another reacted alike
		// meanwhile), or a store that panicked: no place in the window.
		changed := false
		defer func() { settle(changed) }()
		e, err = s.store.Change(r.Context(), thread, c)
		changed = err == nil && e.Rev != cur.Rev
		return e, err
	}()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, messageAnswer{Success: true, Message: who.view(view{v2: true}).json(e)})
}

// messageOf is a message of thread as it is now: NotFound if the thread
// has no message id.
func (s *Server) messageOf(r *http.Request, thread, id string) (store.Entry, error) {
	p, err := s.store.Changes(r.Context(), thread, 0, 0)
	if err != nil {
		return store.Entry{}, err
	}
	for _, e := range p.Messages {
		if e.ID == id {
			return e, nil
		}
	}
	return store.Entry{}, chatrelay.Errorf(chatrelay.NotFound, "no message %s in this thread", id)
}

// decodeJSON is readJSON for a handler: a body it refuses is answered
// with its error, and decodeJSON reports false.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := readJSON(w, r, v); err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

// readJSON reads a JSON object body into v: 413 past MaxBody, 400
// invalid_json if it is not an object of v's shape.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	if !json.Valid(data) || !isObject(data) {
		return chatrelay.Errorf(chatrelay.InvalidJSON, "the body is not a JSON object")
	}
	if err := json.Unmarshal(exactMembers(data, reflect.TypeOf(v)), v); err != nil {
		var ce *chatrelay.Error
		if errors.As(err, &ce) { // a field's own refusal (name)
			return ce
		}
		return chatrelay.Errorf(chatrelay.InvalidJSON, "the body's fields have the wrong types: %s", typeError(err))
	}
	return nil
}

// exactMembers is the JSON object data with only the members whose names
// are exactly those of t's fields (a struct, or a pointer to one; and so
// on in each member that is itself such an object), so that decoding it
// matches names as the schema bundle does. encoding/json matches a name
// in any case: {"decision":"deny","Decision":"approve"} would approve,
// where the bundle (and any client's JSON) reads deny and an unknown
// member. Other members are unknown ones, which bodies ignore. Anything
// else (not an object, a type that decodes itself) is data as it is.
func exactMembers(data []byte, t reflect.Type) []byte {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return data
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) != nil || members == nil {
		return data
	}
	kept := make(map[string]json.RawMessage, len(members))
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous { // its members are promoted, as encoding/json reads them: not filtered here
			return data
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if m, ok := members[name]; ok {
			kept[name] = exactMembers(m, f.Type)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the members' bytes as sent
	if enc.Encode(kept) != nil {
		return data
	}
	return b.Bytes()
}

// name is a body's name field (a grant's, a device's): a JSON string
// that must be text, as a post's text must (invalid_name otherwise). A
// decoder would quietly turn invalid UTF-8 and a lone UTF-16 surrogate
// escape into U+FFFD, keeping a name the client never sent.
type name string

func (n *name) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' && !chatrelay.ValidJSONText(b) {
		return chatrelay.Errorf(chatrelay.InvalidName, "the name is not valid UTF-8 (or holds a lone UTF-16 surrogate escape)")
	}
	if err := json.Unmarshal(b, (*string)(n)); err != nil {
		return &json.UnmarshalTypeError{Value: "not a string", Type: reflect.TypeFor[string]()} // the decoder adds the field's name
	}
	return nil
}

// typeError names the field of a JSON type error, for the client.
func typeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return chatrelay.JSONProblem(err)
	}
	return "see the API"
}
