package chatrelay

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Card is a message hermes sends as structured blocks. Pages draw it as
// text, never as HTML; its v1 text is FallbackText.
type Card struct {
	Title        string  `json:"title,omitempty"`
	FallbackText string  `json:"fallback_text"`
	Blocks       []Block `json:"blocks"`
}

// BlockType is the kind of a card's block.
type BlockType string

// The block types.
const (
	TextBlock   BlockType = "text"
	FieldsBlock BlockType = "fields"
	LinkBlock   BlockType = "link"
	CodeBlock   BlockType = "code"
)

// Block is one block of a card; which fields it has depends on its type.
type Block struct {
	Type     BlockType `json:"type"`
	Text     string    `json:"text,omitempty"`     // text, code
	Fields   []Detail  `json:"fields,omitempty"`   // fields
	URL      string    `json:"url,omitempty"`      // link: http or https only
	Label    string    `json:"label,omitempty"`    // link
	Language string    `json:"language,omitempty"` // code
}

// MaxCardInput bounds the JSON text ParseCard reads (the CLI's file or
// standard input). The card's own limit, LimitCard, counts the card as
// compact JSON, which Check measures: the text may be indented past it.
const MaxCardInput = 1 << 20

// ParseCard decodes a card from JSON, refusing unknown fields, and checks
// it (Card.Check). data holds at most MaxCardInput bytes; its white space
// is not the card's (LimitCard counts the card as compact JSON). JSON that
// is not valid UTF-8 or escapes a lone surrogate is refused, never decoded
// into U+FFFD.
func ParseCard(data []byte) (*Card, error) {
	if len(data) > MaxCardInput {
		return nil, Errorf(InvalidCard, "a card's JSON text is at most %d bytes, this one more", MaxCardInput)
	}
	if !ValidJSONText(data) { // a decoder would make each fault U+FFFD; refused, as send_card's arguments are
		return nil, Errorf(InvalidCard, `the card is not valid UTF-8, or holds a lone UTF-16 surrogate escape (such as "\ud83d"): it is no text`)
	}
	var c Card
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() {
		if err == nil {
			err = fmt.Errorf("data after the card")
		}
		return nil, Errorf(InvalidCard, "the card is not a card object: %s", JSONProblem(err))
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Check returns an *Error with code InvalidCard if c breaks a limit, has a
// block of an unknown type or a field its type does not take, or a link
// that is not http or https.
func (c *Card) Check() error {
	e := InvalidCard
	if err := LimitCardTitle.Check(e, "the title", c.Title); err != nil {
		return err
	}
	if err := LimitCardFallback.Check(e, "fallback_text", c.FallbackText); err != nil {
		return err
	}
	if strings.TrimSpace(c.FallbackText) == "" {
		return Errorf(e, "fallback_text is empty: it is what a v1 client shows")
	}
	if c.Blocks == nil {
		return Errorf(e, "blocks is required: an array of at most %d blocks (it may be empty)", LimitCardBlocks.Max)
	}
	if err := LimitCardBlocks.CheckItems(e, "blocks", len(c.Blocks)); err != nil {
		return err
	}
	for i, b := range c.Blocks {
		if err := b.check(fmt.Sprintf("block %d", i+1)); err != nil {
			return err
		}
	}
	if n := utf8JSONLen(marshal(c)); n > LimitCard.Max {
		return Errorf(e, "a card is at most %d bytes of JSON, this one %d", LimitCard.Max, n)
	}
	return nil
}

func (b Block) check(what string) error {
	e := InvalidCard
	only := func(ok bool, fields string) error {
		if !ok {
			return Errorf(e, "%s (%s) takes only %s", what, b.Type, fields)
		}
		return nil
	}
	switch b.Type {
	case TextBlock:
		if err := only(b.Fields == nil && b.URL == "" && b.Label == "" && b.Language == "", "text"); err != nil {
			return err
		}
		return LimitBlockText.Check(e, what+"'s text", b.Text)
	case CodeBlock:
		if err := only(b.Fields == nil && b.URL == "" && b.Label == "", "text and language"); err != nil {
			return err
		}
		if err := LimitCodeText.Check(e, what+"'s text", b.Text); err != nil {
			return err
		}
		return LimitCodeLanguage.Check(e, what+"'s language", b.Language)
	case FieldsBlock:
		if err := only(b.Text == "" && b.URL == "" && b.Label == "" && b.Language == "", "fields"); err != nil {
			return err
		}
		if err := LimitFields.CheckItems(e, what+"'s fields", len(b.Fields)); err != nil {
			return err
		}
		for j, f := range b.Fields {
			if err := LimitFieldLabel.Check(e, fmt.Sprintf("%s's field %d label", what, j+1), f.Label); err != nil {
				return err
			}
			if err := LimitFieldValue.Check(e, fmt.Sprintf("%s's field %d value", what, j+1), f.Value); err != nil {
				return err
			}
		}
		return nil
	case LinkBlock:
		if err := only(b.Fields == nil && b.Text == "" && b.Language == "", "url and label"); err != nil {
			return err
		}
		if err := LimitLinkURL.Check(e, what+"'s url", b.URL); err != nil {
			return err
		}
		if err := LimitLinkLabel.Check(e, what+"'s label", b.Label); err != nil {
			return err
		}
		u, err := url.Parse(b.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Errorf(e, "%s's url must be an http or https address", what)
		}
		return nil
	}
	return Errorf(e, "%s has type %q: a block is text, fields, link or code", what, b.Type)
}

// Reactions are a message's reactions: each emoji with its reactors, in
// the order they reacted. A message without any has none (nil).
type Reactions map[string][]Author

// CheckEmoji returns InvalidEmoji unless emoji is 1 … 64 code points of
// valid UTF-8 with no white space, control character or invisible format
// character (Unicode's Cf: bidi controls, zero width spaces, U+FEFF). Two
// format characters are parts of emoji and stay allowed: the zero width
// joiner (U+200D) of sequences such as 👨‍👩‍👧, and the tags of a
// subdivision flag (🏴 then tags ending with the cancel tag U+E007F), and
// only there, so that tags cannot carry hidden text.
func CheckEmoji(emoji string) error {
	if err := LimitEmoji.Check(InvalidEmoji, "the emoji", emoji); err != nil {
		return err
	}
	flag, tags := false, false // the last code point was 🏴; in a flag's tags
	for _, r := range emoji {
		switch {
		case unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError:
			return Errorf(InvalidEmoji, "an emoji holds no white space or control character")
		case r >= tagFirst && r <= tagCancel:
			if !flag && !tags {
				return Errorf(InvalidEmoji, "an emoji holds tag characters only in a subdivision flag")
			}
			flag, tags = false, r != tagCancel
			continue
		case tags:
			return Errorf(InvalidEmoji, "a subdivision flag's tags end with U+E007F")
		case r == zeroWidthJoiner:
		case unicode.Is(unicode.Cf, r):
			return Errorf(InvalidEmoji, "an emoji holds no invisible format character (U+%04X)", r)
		}
		flag = r == blackFlag
	}
	if tags {
		return Errorf(InvalidEmoji, "a subdivision flag's tags end with U+E007F")
	}
	return nil
}

// The format characters an emoji may hold.
const (
	zeroWidthJoiner = '\u200d'
	blackFlag       = '\U0001F3F4' // a subdivision flag's base
	tagFirst        = '\U000E0020' // the tag characters of a subdivision flag …
	tagCancel       = '\U000E007F' // … ending with the cancel tag
)

// utf8JSONLen is the length of the compact JSON b (as marshal writes it)
// in the unit JSONUTF8Bytes: each line or paragraph separator counts its 3
// bytes of UTF-8, not the 6 of the "\u2028" escape encoding/json writes
// for it, so that a card measures as its client measures it (JSON.stringify
// writes the separators as they are).
func utf8JSONLen(b []byte) int {
	n := len(b)
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+6 <= len(b) && b[i+1] == 'u' && (string(b[i+2:i+6]) == "2028" || string(b[i+2:i+6]) == "2029") {
			n -= 3
			i += 5
			continue
		}
		i++ // the escaped character: a backslash escaped is no escape's start
	}
	return n
}
