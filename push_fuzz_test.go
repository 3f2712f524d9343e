package chatrelay_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
)

// FuzzPushPayload: a push carries the message as the subscriber may see
// it, whoever wrote its strings (a person's text, a participant's name,
// an agent's interaction and choices, reactions). Whatever they hold,
// the payload is JSON of valid UTF-8 within LimitPushPayload bytes (the
// contract's 3 072), naming its type, thread and link, and its message
// keeps at least its id and epoch.
func FuzzPushPayload(f *testing.F) {
	f.Add("deploy build 412?", "Alex", "Which branch?", "main", "👍", uint8(3), "https://chat.example.com/p")
	f.Add(strings.Repeat("\x01", 4000), strings.Repeat("é", 64), strings.Repeat("\"", 4000), strings.Repeat("\\", 200), strings.Repeat("🎉", 64), uint8(12), "http://"+strings.Repeat("&", 990)+"/p")
	f.Add(strings.Repeat("x", 5000), "", "", "", "", uint8(0), "")
	f.Add("a\u2028b", "\xff", "\xed\xa0\x80", "<script>", "a b", uint8(255), "https://chat.example.com/spaces/newos4/d")
	f.Fuzz(func(t *testing.T, text, name, prompt, choice, emoji string, n uint8, url string) {
		if len(url) > 1000 || strings.ContainsFunc(url, func(r rune) bool { return r < 0x21 || r > 0x7e || r == '"' || r == '\\' }) {
			return // the link is the server's base (--public-url, or a Host header: printable ASCII without quotes) and a page
		}
		m := chatrelay.Message{ID: "MSG-20261202-200000-a1b2c3", Epoch: 1796241600000, Rev: 1796241600001, TS: "2026-12-02T20:00:00+00:00",
			Author: chatrelay.Hermes, Text: text, AuthorName: name,
			Interaction: &chatrelay.Interaction{ID: "ix_3f9a0c7e21b4", Type: chatrelay.Input, Title: name, Prompt: prompt, Deadline: 1796242200000, State: chatrelay.Pending},
			Reactions:   chatrelay.Reactions{}}
		for i := range int(n % 13) {
			m.Interaction.Choices = append(m.Interaction.Choices, chatrelay.Choice{Value: choice + strings.Repeat("v", i), Label: choice, Description: prompt})
		}
		for i := range int(n % 40) {
			m.Reactions[emoji+strings.Repeat("x", i)] = []chatrelay.Author{"operator", "hermes", chatrelay.Author("p:p_0000000" + string(rune('a'+i%6)))}
		}
		b := chatrelay.MarshalPushPayload(chatrelay.PushTypeInteraction, "a1b2c3d4e5f60718", m, url)
		if len(b) > chatrelay.LimitPushPayload.Max || !utf8.Valid(b) {
			t.Fatalf("payload of %d bytes (valid UTF-8: %v)", len(b), utf8.Valid(b))
		}
		var p struct {
			Type, Thread, URL string
			Message           struct {
				ID    string
				Epoch int64
			}
		}
		if err := json.Unmarshal(b, &p); err != nil || p.Type != chatrelay.PushTypeInteraction || p.Thread != "a1b2c3d4e5f60718" ||
			p.Message.ID != m.ID || p.Message.Epoch != m.Epoch || !strings.HasPrefix(url, strings.TrimSuffix(p.URL, "…")) {
			t.Fatalf("payload %s: %+v, %v", b, p, err)
		}
	})
}
