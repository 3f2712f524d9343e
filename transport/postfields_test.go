package transport

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
)

// FuzzPostFieldsAsEncodingJSON: a post body's members are read as
// encoding/json reads the body into a map of its members (what parsePost
// did before segmentio's decoder read it): the same bodies are objects,
// and each member the post reads is the same JSON text, or absent in both.
func FuzzPostFieldsAsEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		`{"text":"hi"}`, ` {"text" : "sp" } `, "\t{\"text\":\"ws\"}\r\n", "{\"text\":\"x\"}\f", "\f{\"text\":\"x\"}", "\v{\"text\":\"x\"}",
		"\xef\xbb\xbf{\"text\":\"bom\"}",
		`{"text":null}`, `{"text":"a","text":"b"}`, `{"text":"a","text":null}`, `{"TEXT":"x"}`, `{"Text":"x"}`,
		`{"\u0074ext":"esc"}`, `{"te\u0078t":"esc"}`, "{\"te\xffxt\":\"a\"}", "{\"text\xff\":\"a\"}", `{"text\ud800":"a"}`,
		"{\"\u212aind\":\"agent\",\"text\":\"kelvin\"}", "{\"ſext\":\"long s\"}", `{"text\u0000":"nul"}`,
		`{"text":"x"} x`, `{"text":"x"}{}`, `{"text":"x"}]`, `{"text":"x"`, `{"text":"x",}`, `{,"text":"x"}`, `{"text"}`, `{"text":}`,
		`null`, `[]`, `"s"`, `1`, `true`, `{}`, ``, ` `, `{"a":{}}`, `nul`, `NULL`,
		`{"text":"x","n":1e999}`, `{"text":"x","n":-}`, `{"text":"x","n":01}`, `{"text":"x","n":1.}`, `{"text":"x","n":.5}`,
		`{"text":"x","n":+1}`, `{"text":"x","n":-0}`, `{"text":"x","n":1e}`, `{"text":"x","n":1E+2}`, `{"text":"x","n":0x1}`,
		`{"text":"x","n":Infinity}`, `{"text":"x","n":NaN}`, `{"text":"x","b":tru}`, `{"text":"x","b":True}`, `{"text":"x","b":nulll}`,
		`{"text":"\ud800"}`, `{"text":"\x41"}`, `{"text":"\u12"}`, `{"text":"\/"}`, `{"text":"\'"}`, "{\"text\":\"a\tb\"}", "{\"text\":\"a\x7fb\"}",
		`{"text":'x'}`, `{text:"x"}`, `{"text":"x","o":{"a":1,"a":2}}`, `{"text":"x","o":[1,2,]}`, `{"text":"x","o":[,]}`,
		`{"text":"x","attachments":[]}`, `{"attachments":["ATT-1"],"kind":"agent","client_id":"c-1"}`, `{"text": 5}`,
		`{"text":"x","kind":{"a":[{"b":[]}]}}`, `{"text":"x","o":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		`{"text":"x","o":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
		`{"text":"x","o":` + strings.Repeat("[", 40) + strings.Repeat("]", 39) + `}`,
		`{"text":"x","o":"` + strings.Repeat("[", 40) + `"}`, `{"text":"x","o":` + strings.Repeat("]", 40) + `}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got postFields
		ok := got.decode(data)
		var raw map[string]json.RawMessage
		wantOK := json.Unmarshal(data, &raw) == nil && raw != nil
		if ok != wantOK {
			t.Fatalf("%q: an object %v, encoding/json says %v", data, ok, wantOK)
		}
		if !ok {
			return
		}
		for _, m := range []struct {
			name string
			got  json.RawMessage
		}{{"text", got.Text}, {"kind", got.Kind}, {"client_id", got.ClientID}, {"attachments", got.Attachments}} {
			want, in := raw[m.name]
			if (m.got != nil) != in || !bytes.Equal(m.got, want) {
				t.Fatalf("%q: %s = %q (present %v), encoding/json: %q (present %v)", data, m.name, m.got, m.got != nil, want, in)
			}
		}
	})
}

// TestParsePostAllocations: a post body of the common shape is read in 4
// allocations: the fields, the text's JSON and its string, the post (12
// when encoding/json read the body into a map of its members).
func TestParsePostAllocations(t *testing.T) {
	if raceOn {
		t.Skip("the race detector moves more values to the heap")
	}
	body := []byte(`{"text":"a message of a typical length, about sixty characters long."}`)
	var p postBody
	var err error
	n := testing.AllocsPerRun(200, func() { p, err = parsePost(body, principal{role: chatrelay.Owner}) })
	if err != nil || p.Text != "a message of a typical length, about sixty characters long." || p.Kind != chatrelay.Operator {
		t.Fatalf("parsePost = %+v, %v", p, err)
	}
	if n > 4 {
		t.Errorf("parsePost allocates %v times, want at most 4", n)
	}
}

// BenchmarkParsePost: a post body of the common shape, as S2 sends it.
func BenchmarkParsePost(b *testing.B) {
	body := []byte(`{"text":"a message of a typical length, about sixty characters long."}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parsePost(body, principal{role: chatrelay.Owner}); err != nil {
			b.Fatal(err)
		}
	}
}
