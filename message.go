package chatrelay

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
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
	v1 := v1Message{ID: m.ID, Epoch: m.Epoch, TS: m.TS, Author: m.Author, Text: V1Text(m)}
	if b, ok := appendPlainV1(make([]byte, 0, plainSize(&v1)), &v1); ok {
		return b
	}
	return marshal(v1)
}

// MarshalMessageV2 encodes m as the v2 message object: the v1 fields, rev
// (its epoch if it never changed) and the v2 fields it has.
func MarshalMessageV2(m Message) []byte {
	if m.Rev == 0 {
		m.Rev = m.Epoch
	}
	if m.Interaction == nil && m.Card == nil && len(m.Reactions) == 0 && len(m.Attachments) == 0 &&
		plainString(m.AuthorName) && plainString(m.ClientID) {
		v1 := v1Message{ID: m.ID, Epoch: m.Epoch, TS: m.TS, Author: m.Author, Text: m.Text}
		b, ok := appendPlainV1(make([]byte, 0, plainSize(&v1)+len(m.AuthorName)+len(m.ClientID)+64), &v1)
		if ok {
			b = b[:len(b)-1] // the closing brace
			if m.Rev != 0 {
				b = strconv.AppendInt(append(b, `,"rev":`...), m.Rev, 10)
			}
			if m.AuthorName != "" {
				b = append(append(append(b, `,"author_name":"`...), m.AuthorName...), '"')
			}
			if m.ClientID != "" {
				b = append(append(append(b, `,"client_id":"`...), m.ClientID...), '"')
			}
			return append(b, '}')
		}
	}
	return marshal(m)
}

// The common message (plain strings, none of the v2 objects) is encoded
// by hand, byte for byte as marshal encodes it (TestMarshalMessagePlain,
// FuzzMarshalMessage): encoding/json's reflection, encoder and buffer were
// a twentieth of the file store's CPU per post. Anything else goes
// through marshal.

// plainSize is about the length of v's object.
func plainSize(v *v1Message) int {
	return len(v.ID) + len(v.TS) + len(v.Author) + len(v.Text) + 80
}

// appendPlainV1 appends v's object to b, as marshal would, if every string
// of it is plain (plainString); else ok is false.
func appendPlainV1(b []byte, v *v1Message) (_ []byte, ok bool) {
	if !plainString(v.ID) || !plainString(v.TS) || !plainString(string(v.Author)) || !plainString(v.Text) {
		return b, false
	}
	b = append(append(b, `{"id":"`...), v.ID...)
	b = strconv.AppendInt(append(b, `","epoch":`...), v.Epoch, 10)
	b = append(append(b, `,"ts":"`...), v.TS...)
	b = append(append(b, `","author":"`...), v.Author...)
	b = append(append(b, `","text":"`...), v.Text...)
	return append(b, `"}`...), true
}

// plainString reports whether encoding/json (HTML escaping off) writes s
// as it is between its quotes: no byte below 0x20, no '"' or '\\', valid
// UTF-8 and neither U+2028 nor U+2029 (which it escapes).
func plainString(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || (utf8.ValidString(s) && !strings.Contains(s, "\u2028") && !strings.Contains(s, "\u2029"))
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
