package redisstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// A message is kept as its v1 JSON in the log (immutable, what v1 readers
// read byte for byte) and, if it has v2 state (a v2 field, or a change),
// as its current v2 object beside it. These build a store.Entry from
// those, without encoding what is already encoded: a message without v2
// state has for v2 object its v1 object with "rev" (its epoch) added.

// v2Entry decodes a message's stored v2 object. v1 is its v1 JSON if the
// caller has it (nil: it is encoded); the v2 object must then begin with
// it (its v1 fields, byte for byte), or it is another message's.
func v2Entry(v1 []byte, v2 string) (store.Entry, error) {
	if v1 != nil && !sameMessage(v1, v2) {
		return store.Entry{}, errors.New("a v2 object that is not its message's")
	}
	var m chatrelay.Message
	if err := json.Unmarshal([]byte(v2), &m); err != nil {
		return store.Entry{}, err
	}
	if m.ID == "" || m.Author == "" || m.Epoch <= 0 || m.Rev < m.Epoch {
		return store.Entry{}, errors.New("incomplete v2 message")
	}
	if v1 == nil {
		v1 = chatrelay.MarshalMessage(m)
	}
	return store.Entry{Message: m, JSON: v1, JSON2: []byte(v2)}, nil
}

// stored decodes a message as the scripts answer it: its v1 JSON, and
// its v2 object ("" if it has no v2 state).
func stored(v1, v2 string) (store.Entry, error) {
	if v2 == "" {
		return parseEntry(v1)
	}
	return v2Entry([]byte(v1), v2)
}

// entryOfJSON decodes a message as the feed carries it: its v1 JSON if
// it has no v2 state, else its v2 object.
func entryOfJSON(js string) (store.Entry, error) {
	if !strings.Contains(js, `,"rev":`) { // a key: in a string value the quotes are escaped
		return parseEntry(js)
	}
	return v2Entry(nil, js)
}

// v2Tail is what follows the rev's digits in m's v2 object. A script that
// gives the message its rev stores its v1 JSON without the closing brace,
// `,"rev":`, the rev and this tail: chatrelay.MarshalMessageV2 of m with
// that rev (chatrelay.Message's first fields are the v1 fields, then rev;
// TestV2Encoding holds it to that).
func v2Tail(m chatrelay.Message) string {
	m.Rev = 1
	v2 := string(chatrelay.MarshalMessageV2(m))
	// The first `,"rev":1` is the key: in a string value the quotes are escaped.
	const key = `,"rev":1`
	return v2[strings.Index(v2, key)+len(key):]
}

// v2Head is a message's v2 object up to its rev's digits: its v1 fields
// as the v2 object has them, then `,"rev":`. The first `,"rev":` is the
// key: in a string value the quotes are escaped.
func v2Head(v2 []byte) string {
	const key = `,"rev":`
	return string(v2[:bytes.Index(v2, []byte(key))+len(key)])
}

// hasV2 reports whether m has a v2 field, so that its v2 object is more
// than its v1 object and rev.
func hasV2(m *chatrelay.Message) bool {
	return m.AuthorName != "" || m.ClientID != "" || m.Interaction != nil || m.Card != nil || len(m.Reactions) > 0 || len(m.Attachments) > 0
}

// sameMessage reports whether the v2 object v2 begins with the v1 JSON v1
// (its v1 fields, byte for byte); for a message with attachments, whose
// v1 text has a line per attachment, up to the text.
func sameMessage(v1 []byte, v2 string) bool {
	if len(v1) >= 2 && len(v2) >= len(v1) && v2[:len(v1)-1] == string(v1[:len(v1)-1]) && v2[len(v1)-1] == ',' {
		return true
	}
	// The key ,"text": cannot be in the id, ts or author: quotes in a string value are escaped.
	i := bytes.Index(v1, []byte(`,"text":`))
	return i > 0 && strings.HasPrefix(v2, string(v1[:i+8])) && strings.Contains(v2, `"attachments":[`)
}

// about attaches a message's v2 JSON to a domain error (as the file store
// does: a refused answer carries the message as it is).
func about(err error, js []byte) error {
	var e *chatrelay.Error
	if errors.As(err, &e) {
		c := *e
		c.About = js
		return &c
	}
	return err
}

// jsonString encodes s as encoding/json does inside chatrelay.MarshalMessage
// (no HTML escaping), so the message JSON the script assembles is byte for
// byte what chatrelay.MarshalMessage would make.
func jsonString(s string) string {
	if plainJSON(s) { // most texts and every author: one allocation, not an encoder's
		return `"` + s + `"`
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic("redisstore: encode string: " + err.Error()) // a string always encodes
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// jsonStrings is jsonString of a and of b, in one allocation for the
// usual pair of plain texts (a post's author and text, at every post).
func jsonStrings(a, b string) (string, string) {
	if !plainJSON(a) || !plainJSON(b) {
		return jsonString(a), jsonString(b)
	}
	both := `"` + a + `""` + b + `"`
	return both[:len(a)+2], both[len(a)+2:]
}

// plainJSON reports whether s is printable ASCII with neither a quote
// nor a backslash: what encoding/json writes as it is, between quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// parseEntry decodes one stored v1 message JSON, of a message without v2
// state: its rev is its epoch, and its v2 object its v1 object with
// "rev" added at its end (what chatrelay.MarshalMessageV2 makes of a
// message that has no v2 field). The store writes one exact layout
// (chatrelay.MarshalMessage's); parseFast reads it without reflection,
// and anything else goes through encoding/json. Both encodings share one
// allocation: every post's answer and its feed message come this way.
func parseEntry(js string) (store.Entry, error) {
	m, err := parseMessage(js)
	if err != nil {
		return store.Entry{}, err
	}
	b := make([]byte, 0, 2*len(js)+24)
	b = append(b, js...)
	b = append(b, js[:len(js)-1]...)
	b = append(b, `,"rev":`...)
	b = strconv.AppendInt(b, m.Epoch, 10)
	b = append(b, '}')
	m.Rev = m.Epoch
	return store.Entry{Message: m, JSON: b[:len(js):len(js)], JSON2: b[len(js):len(b):len(b)]}, nil
}

// parseV1 is parseEntry without the v2 object (JSON2) and rev, which the
// caller adds (plainEntries, for a page at once).
func parseV1(js string) (store.Entry, error) {
	m, err := parseMessage(js)
	if err != nil {
		return store.Entry{}, err
	}
	return store.Entry{Message: m, JSON: []byte(js)}, nil
}

// parseMessage decodes a v1 message JSON and checks it is whole.
func parseMessage(js string) (chatrelay.Message, error) {
	m, ok := parseFast(js)
	if !ok {
		var err error
		if m, err = unmarshalMessage(js); err != nil {
			return chatrelay.Message{}, err
		}
	}
	if m.ID == "" || m.Author == "" || m.Epoch <= 0 {
		return chatrelay.Message{}, errors.New("incomplete message")
	}
	return m, nil
}

// unmarshalMessage is encoding/json's decode of js. A function of its own
// so that only its message goes to the heap (json.Unmarshal takes its
// address): a message decoded in place by the caller was one allocation
// of its size at every parse, parseFast's too.
func unmarshalMessage(js string) (chatrelay.Message, error) {
	var m chatrelay.Message
	err := json.Unmarshal([]byte(js), &m)
	return m, err
}

// plainEntries completes entries read by parseV1 as plainEntry does, with
// one allocation for all their v2 objects.
func plainEntries(es []store.Entry) {
	n := 0
	for _, e := range es {
		n += len(e.JSON) + 24
	}
	buf := make([]byte, 0, n)
	for i := range es {
		e := &es[i]
		start := len(buf)
		buf = append(buf, e.JSON[:len(e.JSON)-1]...)
		buf = append(buf, `,"rev":`...)
		buf = strconv.AppendInt(buf, e.Epoch, 10)
		buf = append(buf, '}')
		e.Rev, e.JSON2 = e.Epoch, buf[start:len(buf):len(buf)]
	}
}

// parseFast reads {"id":"…","epoch":N,"ts":"…","author":"…","text":"…"}
// exactly as chatrelay.MarshalMessage writes it, or reports false.
func parseFast(js string) (m chatrelay.Message, ok bool) {
	rest, ok := strings.CutPrefix(js, `{"id":`)
	if !ok {
		return m, false
	}
	var id, epoch, ts, author string
	if id, rest, ok = cutJSONString(rest); !ok {
		return m, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"epoch":`); !ok {
		return m, false
	}
	if epoch, rest, ok = strings.Cut(rest, ","); !ok {
		return m, false
	}
	if epoch == "" || epoch[0] < '1' || epoch[0] > '9' { // JSON: no sign, no leading zero
		return m, false
	}
	e, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return m, false
	}
	if rest, ok = strings.CutPrefix(rest, `"ts":`); !ok {
		return m, false
	}
	if ts, rest, ok = cutJSONString(rest); !ok {
		return m, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"author":`); !ok {
		return m, false
	}
	if author, rest, ok = cutJSONString(rest); !ok {
		return m, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"text":`); !ok {
		return m, false
	}
	text, rest, ok := cutJSONString(rest)
	if !ok || rest != "}" {
		return m, false
	}
	return chatrelay.Message{ID: id, Epoch: e, TS: ts, Author: chatrelay.Author(author), Text: text}, true
}

// cutJSONString decodes the JSON string at the start of s and returns the
// rest of s after it. A string of plain valid UTF-8 is sliced; one with
// escapes goes through encoding/json; one with a control character or
// invalid UTF-8 (never stored, but JSON would refuse or replace it) is
// not ok, so the caller falls back to encoding/json for the whole message.
func cutJSONString(s string) (val, rest string, ok bool) {
	if len(s) == 0 || s[0] != '"' {
		return "", s, false
	}
	escaped := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20:
			return "", s, false
		case c == '\\':
			escaped = true
			i++
		case c == '"':
			if !escaped {
				if !utf8.ValidString(s[1:i]) {
					return "", s, false
				}
				return s[1:i], s[i+1:], true
			}
			var v string // here: &v escapes, an allocation each call were it the result
			if err := json.Unmarshal([]byte(s[:i+1]), &v); err != nil {
				return "", s, false
			}
			return v, s[i+1:], true
		}
	}
	return "", s, false
}
