package chatrelay_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestValidJSONText: a JSON string is text if it is valid UTF-8 and
// escapes no lone UTF-16 surrogate; a pair of escapes, an escaped
// backslash before "u" and raw UTF-8 are text.
func TestValidJSONText(t *testing.T) {
	for _, c := range []struct {
		name, s string
		want    bool
	}{
		{"ASCII", `"hello"`, true},
		{"raw UTF-8", "\"caf\u00e9 \U0001F600\"", true},
		{"a surrogate pair", `"\ud83d\ude00"`, true},
		{"an escaped backslash before u", `"\\ud83d"`, true},
		{"invalid UTF-8", "\"caf\xe9\"", false},
		{"a lone high surrogate", `"smile \ud83d"`, false},
		{"a lone low surrogate", `"\ude00 tail"`, false},
		{"a high surrogate before a letter", `"\ud83d\u0041"`, false},
	} {
		assert.Equal(t, c.name, chatrelay.ValidJSONText([]byte(c.s)), c.want)
	}
}

// TestJSONProblemCutsAnUnknownField: an unknown field's name is the
// client's bytes, of any length; the words name it cut, not whole (an
// outside probe sent an MCP tool call a 20 000-byte field name and got it
// back twice, in the text and in structuredContent).
func TestJSONProblemCutsAnUnknownField(t *testing.T) {
	long := strings.Repeat("a", 20000)
	d := json.NewDecoder(strings.NewReader(`{"` + long + `":1}`))
	d.DisallowUnknownFields()
	var v struct{ Thread string }
	err := d.Decode(&v)
	assert.True(t, err != nil, "an unknown field decodes")
	words := chatrelay.JSONProblem(err)
	assert.True(t, strings.HasPrefix(words, `unknown field "aaa`), "the words name the field: %.80s", words)
	assert.True(t, len(words) < 400, "the words are %d bytes: %.80s…", len(words), words)
}

// TestUnmarshalExactCase: keys match struct fields in their own case only
// (as the MCP SDK reads a message), a key in another case is ignored
// whatever its place, and more than one value is an error, as for
// json.Unmarshal.
func TestUnmarshalExactCase(t *testing.T) {
	type message struct {
		Method string `json:"method"`
		ID     int    `json:"id"`
	}
	for _, c := range []struct {
		in   string
		want message
		ok   bool
	}{
		{`{"method":"ping","id":2}`, message{"ping", 2}, true},
		{`{"METHOD":"initialize","id":2}`, message{"", 2}, true},
		{`{"method":"ping","Method":"initialize","id":2,"ID":3}`, message{"ping", 2}, true},
		{` {"method":"ping"} `, message{Method: "ping"}, true},
		{`{"method":"ping"} {"method":"initialize"}`, message{}, false},
		{`{"method":5}`, message{}, false},
	} {
		var m message
		err := chatrelay.UnmarshalExactCase([]byte(c.in), &m)
		if (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok=%v", c.in, err, c.ok)
			continue
		}
		if c.ok && m != c.want {
			t.Errorf("%s: got %+v, want %+v", c.in, m, c.want)
		}
	}
}
