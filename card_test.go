package chatrelay_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
)

// FuzzParseCard: a card comes from the host (the CLI's stdin, an MCP
// tool). Parsing never panics; a refusal is invalid_card; what is
// accepted keeps every limit, has only http(s) links, and encodes to at
// most the card limit's bytes of JSON.
func FuzzParseCard(f *testing.F) {
	for _, s := range []string{
		`{"title":"Build 412","fallback_text":"green","blocks":[{"type":"text","text":"ok"},{"type":"fields","fields":[{"label":"a","value":"b"}]},{"type":"link","url":"https://x.test/","label":"x"},{"type":"code","text":"a\tb","language":"go"}]}`,
		`{"fallback_text":"f","blocks":[]}`, `{"fallback_text":"f","blocks":[{"type":"link","url":"javascript:1"}]}`,
		`{"fallback_text":" ","blocks":[]}`, `{"fallback_text":"f"}`, `{"fallback_text":"f","blocks":[],"x":1}`, `[]`, `null`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := chatrelay.ParseCard(data)
		if err != nil {
			if chatrelay.CodeOf(err) != chatrelay.InvalidCard {
				t.Fatalf("%q: code %s", data, chatrelay.CodeOf(err))
			}
			return
		}
		if strings.TrimSpace(c.FallbackText) == "" || c.Blocks == nil || len(c.Blocks) > chatrelay.LimitCardBlocks.Max {
			t.Fatalf("%q accepted as %+v", data, c)
		}
		for _, b := range c.Blocks {
			if b.Type == chatrelay.LinkBlock && !strings.HasPrefix(b.URL, "https://") && !strings.HasPrefix(b.URL, "http://") {
				t.Fatalf("%q: a link to %q accepted", data, b.URL)
			}
		}
		out, err := json.Marshal(c)
		if err != nil || !utf8.Valid(out) || len(out) > chatrelay.LimitCard.Max {
			t.Fatalf("%q encodes as %d bytes (%v)", data, len(out), err)
		}
	})
}
