package chatrelay

import (
	"bytes"
	"encoding/json"
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

// Message is one stored chat message. Its JSON form, with exactly these five
// fields in this order, is the message object of the frozen v1 poll answer.
type Message struct {
	ID     string `json:"id"`
	Epoch  int64  `json:"epoch"`
	TS     string `json:"ts"`
	Author Author `json:"author"`
	Text   string `json:"text"`
}

// MarshalMessage encodes m as the v1 message object, without HTML escaping
// (the text is shown as text, and "<" reads better than "\u003c" in a log).
func MarshalMessage(m Message) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		// Message has only strings and an integer: Encode cannot fail.
		panic("chatrelay: encode message: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
