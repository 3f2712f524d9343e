package transport

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// plantedSecret is a secret of one of the contract's shapes built around
// a random body: the body is what must never reach a participant.
type plantedSecret struct {
	name  string
	build func(body, hex string) string
	token bool // made of RFC 9110 token characters: it may be an attachment's type
}

var plantedSecrets = []plantedSecret{
	{"password=", func(b, _ string) string { return "password=" + b }, false},
	{"JSON api_key", func(b, _ string) string { return `{"api_key": "` + b + `"}` }, false},
	{"token: quoted", func(b, _ string) string { return "token: '" + b + "'" }, false},
	{"ghp_", func(b, _ string) string { return "ghp_" + b }, true},
	{"sk-", func(b, _ string) string { return "sk-" + b }, true},
	{"chp_", func(b, h string) string { return "chp_" + b + h[:43-len(b)] }, true},
	{"chd_", func(b, h string) string { return "chd_" + h[:43-len(b)] + b }, true},
	{"cha_", func(b, h string) string { return "cha_" + b + h[:43-len(b)] }, true},
	{"xoxb-", func(b, _ string) string { return "xoxb-" + b }, true},
	{"JWT", func(b, _ string) string { return "eyJhbGciOi." + b + ".sig_" + b }, true},
	{"Bearer", func(b, _ string) string { return "Authorization: Bearer " + b }, false},
	{"URL password", func(b, _ string) string { return "https://bob:" + b + "@git.example.com/x" }, false},
	{"PEM", func(b, _ string) string {
		return "-----BEGIN RSA PRIVATE KEY-----\n" + b + "\n-----END RSA PRIVATE KEY-----"
	}, false},
	{"thread token", func(_, h string) string { return h }, true},
	{"AKIA", func(_, h string) string { return "AKIA" + strings.ToUpper(h[:16]) }, true},
}

// fuzzBody is a random-looking body of 24 letters and digits, and 64
// hex, from seed (splitmix64): the same seed, the same secret, so a
// crasher repeats.
func fuzzBody(seed uint64) (body, hex string) {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	next := func() uint64 {
		seed += 0x9e3779b97f4a7c15
		z := seed
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	var b, h strings.Builder
	b.WriteByte('Q') // a letter first: no shape reads it as a number
	for b.Len() < 24 {
		b.WriteByte(alnum[next()%uint64(len(alnum))])
	}
	for h.Len() < 64 {
		h.WriteByte("0123456789abcdef"[next()%16])
	}
	return b.String(), h.String()
}

// FuzzRedactViews: whatever a message holds (a text, an author's name, an
// approval or an input with its title, prompt, details, choices and
// answer, a card, attachments' names and types, reactions), a secret
// planted in any one of its strings, anywhere (at a field's limit too) —
// or the value of a detail or card field whose label is secret-named,
// said again in the prompt or the card's fallback_text — reaches a
// participant in none of the encodings a
// participant is sent: the v1 and v2 objects, the v1 text, the SSE and
// WebSocket frames of each kind, the push payload, and the message a
// refusal carries (view.about). The owner's view is the message as
// stored, untouched by the redaction; redacting the participant's view
// again changes nothing.
func FuzzRedactViews(f *testing.F) {
	for i := range plantedSecrets {
		for field := range 14 {
			f.Add(uint8(i), uint8(field), uint8(field), uint16(3), uint16(field*300), uint64(i*31+field), "Deploy build 412", "DB password for prod", "main")
		}
	}
	f.Add(uint8(0), uint8(12), uint8(1), uint16(3), uint16(0), uint64(5), "Deploy build 412", "DB", "main")
	f.Add(uint8(0), uint8(12), uint8(3), uint16(3), uint16(2100), uint64(6), "Deploy report", "prod", "s3")
	f.Add(uint8(0), uint8(4), uint8(1), uint16(0), uint16(0), uint64(7), "a\"b", "API key (staging)", "password:")
	f.Add(uint8(5), uint8(3), uint8(2), uint16(9), uint16(995), uint64(8), "-----BEGIN ", "x", strings.Repeat("é", 300))
	f.Fuzz(func(t *testing.T, pick, field, kind uint8, at, grow uint16, seed uint64, a, b, c string) {
		// grow lengthens the first string towards the fields' limits
		// (a cut, then, may fall at the secret).
		a = strings.Repeat("x", int(grow)%4200) + a
		body, hex := fuzzBody(seed)
		for _, s := range []string{a, b, c} {
			if strings.Contains(s, body[:8]) || strings.Contains(s, body[16:]) || strings.Contains(strings.ToLower(s), hex[:16]) {
				return // the fuzzer wrote the secret itself
			}
		}
		sec := plantedSecrets[int(pick)%len(plantedSecrets)]
		secret := sec.build(body, hex)
		hidden := body
		if field%14 != 12 && !strings.Contains(secret, body) {
			hidden = hex[:24]
			if sec.name == "AKIA" {
				hidden = strings.ToUpper(hex[:16])
			}
		}
		plant := func(s string) string {
			i := int(at) % (len(s) + 1)
			for i > 0 && i < len(s) && s[i]&0xc0 == 0x80 {
				i--
			}
			return s[:i] + " " + secret + " " + s[i:]
		}
		m := chatrelay.Message{ID: "MSG-1", Epoch: 7, TS: "2026-12-03T11:00:00.000Z", Author: chatrelay.Hermes, ClientID: "tab-" + hex[:8]}
		// The message's strings, each a fuzz string, one of them (field)
		// with the secret planted in it.
		n := 0
		str := func(s string) string {
			n++
			if n-1 == int(field)%14 {
				return plant(s)
			}
			return s
		}
		// The secret as the value of a secret-named label: the bare body,
		// no shape, and said again as a "label: value" line in the
		// prompt or the card's fallback_text.
		labelled := field%14 == 12
		secretLabel, secretValue := "DB password for "+b, c+" "+body
		echo := ""
		if labelled {
			echo = "\n" + secretLabel + ": " + secretValue
		}
		m.AuthorName = str(b)
		switch kind % 4 {
		case 0:
			m.Text = str(a)
		case 1, 2:
			var ask chatrelay.Ask
			if kind%4 == 1 {
				ask = chatrelay.Ask{Type: chatrelay.Approval, Title: str(b), Prompt: str(a) + "." + echo, Details: []chatrelay.Detail{{Label: "build" + str(c), Value: str(a)}}}
			} else {
				ask = chatrelay.Ask{Type: chatrelay.Input, Title: str(b), Prompt: str(a) + ".", AllowText: at%2 == 0,
					Choices: []chatrelay.Choice{{Value: str(c) + "1", Label: str(a), Description: str(b)}, {Value: "2"}}}
			}
			if labelled && kind%4 == 1 {
				ask.Details = append(ask.Details, chatrelay.Detail{Label: secretLabel, Value: secretValue})
			}
			ix := ask.Interaction(time.UnixMilli(1_800_000_000_000))
			m.Text = ix.RenderText() // what the store keeps (NewMessage.Prepare)
			if at%3 == 0 {
				ix.State, ix.AnsweredBy, ix.AnsweredAt = chatrelay.Approved, chatrelay.Operator, 1_800_000_001_000
				ix.Answer = &chatrelay.Answer{Decision: chatrelay.Approve}
				if ix.Type == chatrelay.Input {
					ix.State, ix.Answer = chatrelay.Answered, &chatrelay.Answer{Value: str(c)}
				}
			}
			m.Interaction = ix
		case 3:
			card := &chatrelay.Card{Title: str(b), FallbackText: str(a) + "." + echo, Blocks: []chatrelay.Block{
				{Type: chatrelay.TextBlock, Text: str(c)},
				{Type: chatrelay.FieldsBlock, Fields: []chatrelay.Detail{{Label: "env" + str(b), Value: str(a)}}},
				{Type: chatrelay.LinkBlock, URL: "https://example.com/" + str(c), Label: str(a)},
				{Type: chatrelay.CodeBlock, Text: str(b), Language: str(c)},
			}}
			if labelled {
				card.Blocks[1].Fields = append(card.Blocks[1].Fields, chatrelay.Detail{Label: secretLabel, Value: secretValue})
			}
			m.Text, m.Card = card.FallbackText, card
		}
		m.Attachments = []chatrelay.Attachment{{ID: "at_3f9a0c7e21b4", Name: str(c) + ".txt", Type: "text/plain", Size: 12, SHA256: strings.Repeat("5e", 32)}}
		if sec.token && field%14 == 13 {
			m.Attachments[0].Type = "application/" + secret
		}
		m.Reactions = chatrelay.Reactions{str(b): {chatrelay.Operator}, "👍": {chatrelay.Hermes}}
		planted := n > int(field)%14 || labelled && (kind%4 == 1 || kind%4 == 3) || sec.token && field%14 == 13
		if !planted {
			return
		}

		owner := string(chatrelay.MarshalMessageV2(m))
		e := store.NewEntry(m)
		ev := NewEvent("0123456789abcdef", e)
		var views []string
		for k := range numKinds {
			views = append(views, string(ev.SSE(k, true)), string(ev.WS(k, true)))
		}
		r, changed := chatrelay.RedactMessage(m)
		views = append(views, string(chatrelay.MarshalMessage(r)), string(chatrelay.MarshalMessageV2(r)), chatrelay.V1Text(r),
			string(chatrelay.MarshalPushPayload("reply", "0123456789abcdef", r, "https://chat.example.com/p")),
			string(view{v2: true, redact: true}.about(e.JSON2)), string(view{redact: true}.json(e)), string(view{v2: true, redact: true}.json(e)))
		if !changed {
			t.Fatalf("a message with %s planted is reported unchanged: %s", sec.name, owner)
		}
		for i, v := range views {
			for _, leak := range []string{hidden, m.ClientID} {
				if strings.Contains(v, leak) {
					t.Fatalf("%s (field %d, kind %d): a participant's view %d holds %q:\n%s\nowner: %s", sec.name, field%14, kind%4, i, leak, v, owner)
				}
			}
		}
		if string(chatrelay.MarshalMessageV2(m)) != owner || string(e.JSON2) != owner {
			t.Fatalf("the redaction changed the owner's view:\n%s\nwas %s", chatrelay.MarshalMessageV2(m), owner)
		}
		if !strings.Contains(owner, hidden) && !strings.Contains(owner, jsonString(hidden)) {
			t.Fatalf("%s: the owner's view lacks the secret: %s", sec.name, owner)
		}
		again, _ := chatrelay.RedactMessage(r)
		if a, b := chatrelay.MarshalMessageV2(again), chatrelay.MarshalMessageV2(r); string(a) != string(b) {
			t.Fatalf("redacting the participant's view again changed it:\n%s\nwas %s", a, b)
		}
	})
}

// jsonString is s as it reads inside a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}
