package chatrelay

import (
	"bytes"
	"testing"
)

// TestMarshalMessagePlain: the encoding of a message without v2 objects
// (MarshalMessage, MarshalMessageV2: segmentio/encoding) must be
// encoding/json's, byte for byte: stored documents, frames and answers
// carry these bytes, and a reader compares them.
func TestMarshalMessagePlain(t *testing.T) {
	base := Message{ID: "MSG-20261204-120000-000001", Epoch: 1764849600000, TS: "2026-12-04T12:00:00+00:00", Author: Operator, Text: "hello"}
	for _, c := range []struct {
		name string
		edit func(*Message)
	}{
		{"plain", func(*Message) {}},
		{"empty text", func(m *Message) { m.Text = "" }},
		{"quote", func(m *Message) { m.Text = `say "hi"` }},
		{"backslash", func(m *Message) { m.Text = `C:\dir` }},
		{"newline and tab", func(m *Message) { m.Text = "a\nb\tc\rd\be\ff" }},
		{"control", func(m *Message) { m.Text = "\x00\x01\x1f" }},
		{"html", func(m *Message) { m.Text = "<b>a & b</b>" }},
		{"del", func(m *Message) { m.Text = "a\x7fb" }},
		{"utf-8", func(m *Message) { m.Text = "héllo wörld 👨‍👩‍👧 日本" }},
		{"line separator", func(m *Message) { m.Text = "a\u2028b" }},
		{"paragraph separator", func(m *Message) { m.Text = "a\u2029b" }},
		{"invalid utf-8", func(m *Message) { m.Text = "a\xffb\xc3" }},
		{"rev", func(m *Message) { m.Rev = m.Epoch + 5 }},
		{"zero epoch", func(m *Message) { m.Epoch = 0 }},
		{"negative epoch", func(m *Message) { m.Epoch, m.Rev = -3, -3 }},
		{"author name", func(m *Message) { m.AuthorName = "Ana" }},
		{"author name to escape", func(m *Message) { m.AuthorName = "A\"na" }},
		{"client id", func(m *Message) { m.ClientID = "c-1" }},
		{"author to escape", func(m *Message) { m.Author = "ag\"ent" }},
		{"reactions", func(m *Message) { m.Reactions = Reactions{"👍": {Operator}} }},
		{"attachments", func(m *Message) { m.Attachments = []Attachment{{ID: "a1", Name: "f.txt"}} }},
		{"card", func(m *Message) { m.Card = &Card{} }},
		{"interaction", func(m *Message) { m.Interaction = &Interaction{ID: "i1"} }},
	} {
		m := base
		c.edit(&m)
		checkMarshal(t, c.name, m)
	}
}

func FuzzMarshalMessage(f *testing.F) {
	f.Add("MSG-1", int64(1), "ts", "operator", "text", int64(0), "", "")
	f.Add("a\"b", int64(-1), "\u2028", "x\\", "\xff\n<>&", int64(7), "é", "\x00")
	f.Fuzz(func(t *testing.T, id string, epoch int64, ts, author, text string, rev int64, name, clientID string) {
		checkMarshal(t, "fuzz", Message{ID: id, Epoch: epoch, TS: ts, Author: Author(author), Text: text, Rev: rev, AuthorName: name, ClientID: clientID})
	})
}

// checkMarshal holds m's v1 and v2 encodings to marshal's.
func checkMarshal(t *testing.T, name string, m Message) {
	t.Helper()
	v1 := marshal(v1Message{ID: m.ID, Epoch: m.Epoch, TS: m.TS, Author: m.Author, Text: V1Text(m)})
	if got := MarshalMessage(m); !bytes.Equal(got, v1) {
		t.Errorf("%s: MarshalMessage = %s, encoding/json %s", name, got, v1)
	}
	m2 := m
	if m2.Rev == 0 {
		m2.Rev = m2.Epoch
	}
	v2 := marshal(m2)
	if got := MarshalMessageV2(m); !bytes.Equal(got, v2) {
		t.Errorf("%s: MarshalMessageV2 = %s, encoding/json %s", name, got, v2)
	}
}
