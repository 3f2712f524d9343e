package chatrelay

import (
	"bytes"
	"encoding/json"

	segjson "github.com/segmentio/encoding/json"
)

// Author names who wrote a message. The set is open: later kinds of author
// (a shared participant, another agent) are new constants, and stored
// records keep whatever author string they were written with.
type Author string

// The authors of contract Part 1.
const (
	Operator Author = "operator" // the person in the browser (kind "operator", the default)
	Agent    Author = "agent"    // the in-page AI (kind "agent")
	Hermes   Author = "hermes"   // the host agent, through the host CLI only
)

// Message is one stored chat message. Its first five fields, in this
// order, are the message object of the frozen v1 poll answer
// (MarshalMessage); the v2 object (MarshalMessageV2) adds the rest.
type Message struct {
	ID     string `json:"id"`
	Epoch  int64  `json:"epoch"`
	TS     string `json:"ts"`
	Author Author `json:"author"`
	Text   string `json:"text"`

	// Rev is the epoch of the message's latest change: its epoch until an
	// interaction's state or a reaction changes it. Every change of a
	// thread, a new message included, takes the next epoch of the
	// thread's one strictly increasing sequence.
	Rev         int64        `json:"rev,omitempty"`
	AuthorName  string       `json:"author_name,omitempty"` // a participant's name (Part 3)
	ClientID    string       `json:"client_id,omitempty"`   // the idempotency key the post carried
	Interaction *Interaction `json:"interaction,omitempty"` // hermes asks for input or approval
	Card        *Card        `json:"card,omitempty"`        // hermes's card
	Reactions   Reactions    `json:"reactions,omitempty"`   // emoji → reactors, in the order they reacted
	Attachments []Attachment `json:"attachments,omitempty"` // files the post named (Part 5)
}

// v1Message is the frozen v1 message object: exactly these five fields.
type v1Message struct {
	ID     string `json:"id"`
	Epoch  int64  `json:"epoch"`
	TS     string `json:"ts"`
	Author Author `json:"author"`
	Text   string `json:"text"`
}

// MarshalMessage encodes m as the v1 message object, without HTML escaping
// (the text is shown as text, and "<" reads better than "\u003c" in a log).
// It never carries a v2 field: a message's attachments are lines of its
// text (v1Text).
func MarshalMessage(m Message) []byte {
	return appendJSON(&v1Message{ID: m.ID, Epoch: m.Epoch, TS: m.TS, Author: m.Author, Text: V1Text(m)})
}

// MarshalMessageV2 encodes m as the v2 message object: the v1 fields, rev
// (its epoch if it never changed) and the v2 fields it has.
func MarshalMessageV2(m Message) []byte {
	if m.Rev == 0 {
		m.Rev = m.Epoch
	}
	if m.Interaction == nil && m.Card == nil && len(m.Reactions) == 0 && len(m.Attachments) == 0 {
		return appendJSON(&m)
	}
	return marshal(m)
}

// appendJSON encodes a message of strings and numbers (v1Message, or a
// Message without its v2 objects) as marshal does, byte for byte
// (TestMarshalMessagePlain, FuzzMarshalMessage), with
// github.com/segmentio/encoding's encoder: encoding/json's reflection,
// encoder and buffer were a twentieth of the file store's CPU per post.
func appendJSON(v any) []byte {
	b, err := segjson.Append(make([]byte, 0, 256), v, 0) // 0: no HTML escaping, as marshal
	if err != nil {
		panic("chatrelay: encode: " + err.Error())
	}
	return b
}

// marshal encodes v compactly without HTML escaping. The domain's types
// hold only strings, integers, booleans and their slices and maps, so
// encoding cannot fail.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("chatrelay: encode: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
