package transport

import (
	"reflect"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
)

// FuzzParsePostFast: the fast path of the post parser accepts only what
// the full parser accepts, with the same result, for the owner and for a
// participant; and it takes the common bodies (else it saves nothing).
func FuzzParsePostFast(f *testing.F) {
	for _, seed := range []string{
		`{"text":"hi"}`,
		` { "text" : "hi" , "kind" : "agent" } `,
		"{\"text\":\"hi\",\n\"kind\":\"operator\",\"client_id\":\"c-1\"}",
		`{"text":"hi","kind":"hermes"}`,
		`{"text":"hi","kind":null}`,
		`{"text":"  "}`,
		`{"text":""}`,
		`{"text":"\u0000"}`,
		"{\"text\":\"a\tb\"}",
		"{\"text\":\"caf\xe9\"}",
		"{\"text\":\"ok\",\"kind\":\"ag\xffent\"}",
		`{"text":"a","text":"b"}`,
		`{"text":"a","client_id":""}`,
		`{"text":"a","client_id":"has space"}`,
		`{"text":"a","client_id":"` + strings.Repeat("x", 200) + `"}`,
		`{"Text":"capital key"}`,
		`{"text":"a"}x`, `{"text":"a",}`, `{"text":"a"`, `{"text" "a"}`,
		`[]`, `null`, `"str"`, ``, `{`, `{}`, `{}{}`,
		`{"text":"` + strings.Repeat("é", 4000) + `"}`,
		`{"text":"` + strings.Repeat("é", 4001) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	owner := principal{role: chatrelay.Owner}
	guest := principal{role: chatrelay.Commenter, grant: &chatrelay.Grant{ID: "g1", Role: chatrelay.Commenter}}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, who := range []principal{owner, guest} {
			fast, ok := parsePostFast(data, who)
			if !ok {
				continue
			}
			full, err := parsePostFull(data, who)
			if err != nil || !reflect.DeepEqual(fast, full) {
				t.Fatalf("%q (participant %v): fast %+v, full %+v, %v", data, who.participant(), fast, full, err)
			}
		}
	})
}

// TestParsePostFastTakesTheCommonBodies: the bodies browsers, agents and
// the load tool send take the fast path.
func TestParsePostFastTakesTheCommonBodies(t *testing.T) {
	for _, body := range []string{
		`{"text":"a message of a typical length, about sixty characters long."}`,
		`{"text":"hi","kind":"agent"}`,
		`{"text":"hi","kind":"operator","client_id":"0b6f7c1e-4a5d-4f6e-9c3b-2d1e0f9a8b7c"}`,
	} {
		if _, ok := parsePostFast([]byte(body), principal{role: chatrelay.Owner}); !ok {
			t.Errorf("%s: not taken by the fast path", body)
		}
	}
}

// BenchmarkParsePost: a typical post body through the parser, and through
// encoding/json (the full parser) for comparison.
func BenchmarkParsePost(b *testing.B) {
	body := []byte(`{"text":"a message of a typical length, about sixty characters long.","kind":"agent"}`)
	who := principal{role: chatrelay.Owner}
	for _, c := range []struct {
		name  string
		parse func([]byte, principal) (postBody, error)
	}{{"parsePost", parsePost}, {"full", parsePostFull}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.parse(body, who); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
