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
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		err = enc.Encode(c)
		out := strings.TrimSuffix(buf.String(), "\n")
		// The limit counts UTF-8: a separator's "\u2028" escape is 6 bytes for its 3.
		seps := 0
		for _, s := range cardStrings(c) {
			seps += strings.Count(s, "\u2028") + strings.Count(s, "\u2029")
		}
		if err != nil || !utf8.ValidString(out) || len(out)-3*seps > chatrelay.LimitCard.Max {
			t.Fatalf("%q encodes as %d bytes (%v)", data, len(out)-3*seps, err)
		}
	})
}

// cardStrings are the strings of c.
func cardStrings(c *chatrelay.Card) []string {
	out := []string{c.Title, c.FallbackText}
	for _, b := range c.Blocks {
		out = append(out, b.Text, b.URL, b.Label, b.Language)
		for _, f := range b.Fields {
			out = append(out, f.Label, f.Value)
		}
	}
	return out
}

// TestCheckEmoji: an emoji is refused with invalid_emoji when it is empty,
// too long, or holds white space, a control character, or an invisible
// format character (a bidi control, a zero width space, a byte order
// mark); the joiner of emoji sequences and the tags of a subdivision flag
// are kept.
func TestCheckEmoji(t *testing.T) {
	t.Parallel()
	england := "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F"
	for _, tc := range []struct {
		name, emoji string
		ok          bool
	}{
		{"one", "👍", true},
		{"with a variation selector", "❤️", true},
		{"a family, joined", "👨\u200d👩\u200d👧", true},
		{"a skin tone", "👋🏽", true},
		{"a subdivision flag", england, true},
		{"a black flag", "\U0001F3F4", true},
		{"a pirate flag", "\U0001F3F4\u200d\u2620\ufe0f", true},
		{"two flags", england + england, true},
		{"a short name", "+1", true},
		{"empty", "", false},
		{"white space", "a b", false},
		{"a control character", "a\x07", false},
		{"65 code points", strings.Repeat("😀", 65), false},
		{"a right-to-left override", "👍\u202e", false},
		{"a left-to-right mark", "\u200e👍", false},
		{"an isolate", "\u2066👍\u2069", false},
		{"a zero width space", "\u200b", false},
		{"a zero width non-joiner", "👍\u200c", false},
		{"a word joiner", "👍\u2060", false},
		{"a byte order mark", "\ufeff👍", false},
		{"a soft hyphen", "a\u00adb", false},
		{"tags with no flag", "a\U000E0067\U000E007F", false},
		{"tags that smuggle text", "👍\U000E0068\U000E0069", false},
		{"a flag's tags not ended", "\U0001F3F4\U000E0067\U000E0062", false},
		{"a flag's tags, then text", "\U0001F3F4\U000E0067a\U000E007F", false},
	} {
		err := chatrelay.CheckEmoji(tc.emoji)
		if tc.ok && err != nil || !tc.ok && chatrelay.CodeOf(err) != chatrelay.InvalidEmoji {
			t.Errorf("%s: CheckEmoji(%+q) = %v", tc.name, tc.emoji, err)
		}
	}
}

// TestParseCardWordsJSON: a card of the wrong shape is refused in JSON's
// words, with the field's path, never Go's type names ("Go struct field
// Card.title of type string") nor encoding/json's "json:" prefix.
func TestParseCardWordsJSON(t *testing.T) {
	for _, tc := range []struct{ card, want string }{
		{`{"title":"t","zz":1}`, `unknown field "zz"`},
		{`{"title":5}`, "title must be a string"},
		{`{"title":"t","blocks":[{"type":"text","text":7}]}`, "blocks.text must be a string"},
	} {
		_, err := chatrelay.ParseCard([]byte(tc.card))
		if chatrelay.CodeOf(err) != chatrelay.InvalidCard || !strings.HasSuffix(err.Error(), ": "+tc.want) ||
			strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "json:") {
			t.Errorf("ParseCard(%s): %v, want invalid_card ending %q", tc.card, err, tc.want)
		}
	}
}

// TestCardLimitCountsUTF8: the card limit counts the card as compact UTF-8
// JSON (json_utf8_bytes), as a client measures it (JSON.stringify, Python's
// json.dumps with ensure_ascii=False): a line or paragraph separator is its
// 3 bytes of UTF-8, not the 6 of the "\u2028" escape encoding/json writes.
// A card of exactly the limit's bytes is taken; one byte more is refused.
func TestCardLimitCountsUTF8(t *testing.T) {
	for _, sep := range []string{"\u2028", "\u2029"} {
		card := func(n int) []byte {
			c := chatrelay.Card{FallbackText: "x", Blocks: []chatrelay.Block{
				{Type: chatrelay.CodeBlock, Text: strings.Repeat(sep, chatrelay.LimitCodeText.Max)},
			}}
			utf8JSON := func() int {
				b, _ := json.Marshal(c)
				return len(b) - 3*strings.Count(string(b), `\u202`) // each separator escaped: 6 bytes for its 3
			}
			for utf8JSON() < n {
				c.Blocks = append(c.Blocks, chatrelay.Block{Type: chatrelay.CodeBlock, Text: strings.Repeat("a", chatrelay.LimitCodeText.Max)})
			}
			last := &c.Blocks[len(c.Blocks)-1]
			last.Text = last.Text[:len(last.Text)-(utf8JSON()-n)]
			if got := utf8JSON(); got != n {
				t.Fatalf("the card is %d bytes of UTF-8 JSON, want %d", got, n)
			}
			b, _ := json.Marshal(c)
			return b
		}
		max := chatrelay.LimitCard.Max
		if _, err := chatrelay.ParseCard(card(max)); err != nil {
			t.Errorf("%+q: a card of %d bytes of UTF-8 JSON: %v", sep, max, err)
		}
		if _, err := chatrelay.ParseCard(card(max + 1)); chatrelay.CodeOf(err) != chatrelay.InvalidCard {
			t.Errorf("%+q: a card of %d bytes of UTF-8 JSON: %v, want invalid_card", sep, max+1, err)
		}
	}
}
