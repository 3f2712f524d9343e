package chatrelay_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestRedact plants each secret shape of the contract in a sentence and
// checks it becomes [redacted], and that ordinary text that looks close
// stays as it is.
func TestRedact(t *testing.T) {
	t.Parallel()
	hex64 := strings.Repeat("a1b2c3d4", 8)
	mac := "3JE0b6DiFZhPZMwdPFsv7qDzDTIbSkYG9Fyw0P0Xf-_" // a ticket's HMAC-SHA256, base64url: 43 characters
	for _, tc := range []struct {
		name, in, want string
	}{
		{"OpenAI key", "use sk-proj-AbCdEfGhIjKlMnOpQrStUv123 here", "use [redacted] here"},
		{"GitHub ghp", "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok", "token [redacted] ok"},
		{"GitHub gho", "gho_ABCDEFGHIJKLMNOPQRST12345", "[redacted]"},
		{"GitHub ghs ghu ghr", "ghs_AAAAAAAAAAAAAAAAAAAAAA ghu_BBBBBBBBBBBBBBBBBBBBBB ghr_CCCCCCCCCCCCCCCCCCCCCC", "[redacted] [redacted] [redacted]"},
		{"GitHub fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "[redacted]"},
		{"AWS access key id", "key AKIAIOSFODNN7EXAMPLE in prod", "key [redacted] in prod"},
		{"Slack bot token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKl", "[redacted]"},
		{"Slack user token", "xoxp-1234567890-abcdef", "[redacted]"},
		{"JWT", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk", "Bearer [redacted]"},
		{"PEM private key", "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nthanks", "key:\n[redacted]\nthanks"},
		{"PEM cut short", "-----BEGIN PRIVATE KEY-----\nMIIEv", "[redacted]"},
		{"share token", "join with chp_" + strings.Repeat("A", 43) + " please", "join with [redacted] please"},
		{"device token", "my phone: chd_" + strings.Repeat("A", 43) + ".", "my phone: [redacted]."},
		{"agent key", "CHATRELAY_AGENT_KEY=cha_" + strings.Repeat("A", 43) + " for /mcp", "CHATRELAY_AGENT_KEY=[redacted] for /mcp"},
		{"thread token", "my token is " + hex64, "my token is [redacted]"},
		{"stream ticket, in a URL", "open http://h/api/chat/stream?ticket=t1.0123456789abcdef.1796320541401." + mac + " now", "open http://h/api/chat/stream?ticket=[redacted] now"},
		{"participant's ticket", "t2.0123456789abcdef.p_1a2b3c4d.1796320541401." + mac, "[redacted]"},
		{"device's ticket", "(t2.0123456789abcdef.d_1a2b3c4d.1796320541401." + mac + ")", "([redacted])"},
		{"file ticket", "img: /api/chat/attachments/at_0123456789ab?ticket=f1.0123456789abcdef.at_0123456789ab.1796320541401." + mac, "img: /api/chat/attachments/at_0123456789ab?ticket=[redacted]"},
		{"a ticket glued to a word", "ticket=t1.0123456789abcdef.1796320541401." + mac + "thanks", "ticket=[redacted]thanks"},
		{"webhook secret", "signed with whsec_WStz26hFnOV/l1SC/CikcIo3hZYaoPG/Qv+xylPvKug= today", "signed with [redacted] today"},
		{"participant's file ticket", "f2.0123456789abcdef.p_1a2b3c4d.at_0123456789ab.1796320541401." + mac + ".", "[redacted]."},
		{"password=", "password=hunter2 and more\nnext", "password=[redacted]\nnext"},
		{"passwd:", "passwd: hunter2", "passwd: [redacted]"},
		{"secret=", "SECRET=abc123", "SECRET=[redacted]"},
		{"private_key=", "SSH_PRIVATE_KEY=abc123", "SSH_PRIVATE_KEY=[redacted]"},
		{"privatekey:", "privateKey: abc123", "privateKey: [redacted]"},
		{"private alone is no key", "private: yes", "private: yes"},
		{"token:", "token: 'abc def' more", "token: '[redacted]' more"},
		{"api_key", "api_key=AbC123, next", "api_key=[redacted]"},
		{"api-key", `api-key: "quoted value"`, `api-key: "[redacted]"`},
		{"API key, in words", "API key: d41d8cd98f00b204e9800998ecf8427e", "API key: [redacted]"},
		{"private key, in words", "Private Key = abc123", "Private Key = [redacted]"},
		{"URL password", "clone https://alice:s3cr3t@git.example.com/repo.git", "clone https://alice:[redacted]@git.example.com/repo.git"},
		{"URL password, redis", "redis://default:p4ss@127.0.0.1:6379/0", "redis://default:[redacted]@127.0.0.1:6379/0"},

		{"63 hex stays", "sha " + hex64[:63] + " done", "sha " + hex64[:63] + " done"},
		{"65 hex stays", hex64 + "f", hex64 + "f"},
		{"password without a value", "I forgot my password again", "I forgot my password again"},
		{"password: then nothing", "password:", "password:"},
		{"a URL without a password", "see https://alice@example.com/x and https://example.com:8443/y", "see https://alice@example.com/x and https://example.com:8443/y"},
		{"sk- too short", "ask-me about sk-123", "ask-me about sk-123"},
		{"a word with gh", "ghost_in_the_shell", "ghost_in_the_shell"},
		{"eyJ alone", "eyJ is how JWTs start", "eyJ is how JWTs start"},
		{"chp_ too short", "chp_short", "chp_short"},
		{"AKIA too short", "AKIA1234", "AKIA1234"},
		{"whsec_ too short", "the whsec_ prefix, whsec_abc", "the whsec_ prefix, whsec_abc"},
		{"a version is no ticket", "see t1.2 and f2.0 of the plan", "see t1.2 and f2.0 of the plan"},
		{"plain text", "Deploy build 412 to production?", "Deploy build 412 to production?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, "redacted", chatrelay.Redact(tc.in), tc.want)
		})
	}
}

// TestRedactShapes: each secret shape of the contract's clarified list
// (2026-12-01), planted in a message: the participant's view of it (v1
// and v2 objects) carries [redacted] and not the secret, and the
// message itself, the owner's view, is the original. keep, when set, is
// text next to the secret that the participant still reads.
func TestRedactShapes(t *testing.T) {
	t.Parallel()
	text := func(s string) chatrelay.Message {
		return chatrelay.Message{ID: "MSG-1", Epoch: 1, Author: chatrelay.Hermes, Text: s}
	}
	approval := func(label, value string) chatrelay.Message {
		m := text("Approval requested")
		m.Interaction = &chatrelay.Interaction{ID: "ix_3f9a0c7e21b4", Type: chatrelay.Approval, Prompt: "Deploy?", State: chatrelay.Pending,
			Details: []chatrelay.Detail{{Label: label, Value: value}}}
		return m
	}
	card := func(label, value string) chatrelay.Message {
		m := text("card")
		m.Card = &chatrelay.Card{FallbackText: "card", Blocks: []chatrelay.Block{{Type: chatrelay.FieldsBlock, Fields: []chatrelay.Detail{{Label: label, Value: value}}}}}
		return m
	}
	ghp := "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	for _, tc := range []struct {
		name         string
		m            chatrelay.Message
		secret, keep string
	}{
		{"details label password", approval("password", "hunter2hunter2"), "hunter2hunter2", "Deploy?"},
		{"details label DB Password", approval("DB Password", "s3cr3t-value"), "s3cr3t-value", ""},
		{"details label GITHUB_TOKEN", approval("GITHUB_TOKEN", "opaquevalue42"), "opaquevalue42", ""},
		{"card fields label api_key", card("api_key", "abc123xyz789"), "abc123xyz789", ""},
		{"card fields label Client Secret", card("Client Secret", "v4lue with spaces"), "v4lue with spaces", ""},
		{"DB_PASSWORD=", text("export DB_PASSWORD=hunter2hunter2"), "hunter2hunter2", "export DB_PASSWORD="},
		{"GITHUB_TOKEN=", text("GITHUB_TOKEN=opaquevalue42"), "opaquevalue42", ""},
		{"client_secret=", text("client_secret=v4lue42"), "v4lue42", ""},
		{"access_token=", text("?access_token=v4lue42"), "v4lue42", ""},
		{"Access_Token: in any case", text("Access_Token: v4lue42"), "v4lue42", ""},
		{"JSON password", text(`{"password":"hunter2hunter2","user":"bob"}`), "hunter2hunter2", `"user":"bob"`},
		{"JSON password with spaces", text(`{"password" : "hunter2 hunter2"}`), "hunter2", ""},
		{"single-quoted key", text(`{'secret': 'v4lue42'}`), "v4lue42", ""},
		{"redis URL without a user", text("redis://:p4ssw0rd@127.0.0.1:6379/0"), "p4ssw0rd", "@127.0.0.1:6379/0"},
		{"URL password with @", text("https://bob:p4ss@w0rd@git.example.com/x"), "w0rd", "@git.example.com/x"},
		{"URL password with /", text("https://bob:p4ss/w0rd@git.example.com/x"), "w0rd", "@git.example.com/x"},
		{"value with &", text("password=first&second-part"), "second-part", ""},
		{"value with ;", text("password=first;second-part"), "second-part", ""},
		{"value with ,", text("password=first,second-part"), "second-part", ""},
		{"value with /", text("token: first/second-part"), "second-part", ""},
		{"value to the end of the line", text("password: two words\nnext line"), "words", "next line"},
		{"unterminated double quote", text("password=\"hunter2hunter2\nnext line"), "hunter2hunter2", "next line"},
		{"unterminated single quote", text("secret: 'hunter2hunter2"), "hunter2hunter2", ""},
		{"PGP private key block", text("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0AAAAB\n-----END PGP PRIVATE KEY BLOCK-----\nthanks"), "lQOYBF0AAAAB", "thanks"},
		{"Slack xoxe-", text("refresh xoxe-1-My0xLTEyMzQ1Njc4OTAx"), "My0xLTEyMzQ1Njc4OTAx", "refresh "},
		{"Slack xoxe.xoxp-", text("xoxe.xoxp-1-My0xLTEyMzQ1Njc4OTAx"), "My0xLTEyMzQ1Njc4OTAx", ""},
		{"Slack xapp-", text("xapp-1-A0123456789-0123456789-abcdef"), "0123456789-abcdef", ""},
		{"Authorization: Bearer", text("Authorization: Bearer opaque.token-value_12345"), "opaque.token-value_12345", "Authorization: "},
		{"curl -H Authorization", text(`curl -H "Authorization: Bearer opaque.token-value_12345" https://api.example.com`), "opaque.token-value_12345", "curl -H "},
		{"a token after _", text("PROD_" + ghp), "abcdefghijklmnopqrstuvwxyz0123456789", "PROD_"},
		{"reaction key", chatrelay.Message{ID: "MSG-1", Epoch: 1, Author: chatrelay.Operator, Text: "hi",
			Reactions: chatrelay.Reactions{"👍": {chatrelay.Hermes}, ghp: {"p:p_1a2b3c4d"}}}, "abcdefghijklmnopqrstuvwxyz0123456789", `"👍":["hermes"]`},
		{"attachment type", chatrelay.Message{ID: "MSG-1", Epoch: 1, Author: chatrelay.Operator, Text: "the log",
			Attachments: []chatrelay.Attachment{{ID: "at_3f9a0c7e21b4", Name: "log.txt", Type: "application/" + ghp, Size: 3}}}, "abcdefghijklmnopqrstuvwxyz0123456789", `"name":"log.txt"`},
		{"client_id", chatrelay.Message{ID: "MSG-1", Epoch: 1, Author: chatrelay.Operator, Text: "hi", ClientID: ghp}, "abcdefghijklmnopqrstuvwxyz0123456789", ""},
		{"client_id of any shape", chatrelay.Message{ID: "MSG-1", Epoch: 1, Author: chatrelay.Operator, Text: "hi", ClientID: "tab-3f9a0c7e21b4:7"}, "tab-3f9a0c7e21b4", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			owner := string(chatrelay.MarshalMessageV2(tc.m))
			r, changed := chatrelay.RedactMessage(tc.m)
			v1, v2 := string(chatrelay.MarshalMessage(r)), string(chatrelay.MarshalMessageV2(r))
			assert.True(t, changed, "the participant's view is reported unchanged")
			for _, js := range []string{v1, v2} {
				assert.True(t, !strings.Contains(js, tc.secret), "the participant reads %q: %s", tc.secret, js)
			}
			assert.True(t, strings.Contains(v2, tc.keep) || strings.Contains(v2, jsonText(tc.keep)), "the participant lost %q: %s", tc.keep, v2)
			assert.True(t, !strings.Contains(v2, `"client_id"`), "the participant reads a client_id: %s", v2)
			assert.True(t, tc.m.ClientID != "" || strings.Contains(v2, chatrelay.Redacted), "nothing [redacted]: %s", v2)
			assert.Equal(t, "the owner's view after the redaction", string(chatrelay.MarshalMessageV2(tc.m)), owner)
			assert.True(t, strings.Contains(owner, tc.secret), "the owner's view lacks %q: %s", tc.secret, owner)
		})
	}
}

// jsonText is s as it reads inside a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

// TestRedactMessage: every string of a v2 message a participant reads is
// redacted; the message given is not changed.
func TestRedactMessage(t *testing.T) {
	t.Parallel()
	key := "sk-proj-AbCdEfGhIjKlMnOpQrStUv123"
	m := chatrelay.Message{Text: "t " + key, AuthorName: "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		Interaction: &chatrelay.Interaction{Title: key, Prompt: key, Choices: []chatrelay.Choice{{Value: key, Label: key, Description: key}},
			Details: []chatrelay.Detail{{Label: "k", Value: key}}, Answer: &chatrelay.Answer{Value: key}},
		Card: &chatrelay.Card{Title: key, FallbackText: key, Blocks: []chatrelay.Block{{Type: "text", Text: key},
			{Type: "fields", Fields: []chatrelay.Detail{{Label: key, Value: key}}}, {Type: "link", URL: "https://u:" + key + "@x.example", Label: key}}}}
	r, changed := chatrelay.RedactMessage(m)
	assert.True(t, changed, "a message with secrets reported unchanged")
	js := string(chatrelay.MarshalMessageV2(r))
	assert.True(t, !strings.Contains(js, "AbCdEfGh"), "a secret left: %s", js)
	assert.True(t, strings.Count(js, "[redacted]") >= 13, "redactions: %s", js)
	assert.Equal(t, "the author's name", r.AuthorName, "[redacted]")
	assert.True(t, strings.Contains(string(chatrelay.MarshalMessageV2(m)), key), "the stored message was changed")
}

// TestRedactSecretLabels: a label a person writes in words ("API key",
// "Private key", with a space) is as secret-named as api_key and
// private_key: its value is redacted whole, in an approval's details and
// in a card's fields, whatever the value's shape. "API key" was not, and
// a card's field showed a participant a plain hex key.
func TestRedactSecretLabels(t *testing.T) {
	t.Parallel()
	const value = "d41d8cd98f00b204e9800998ecf8427e"
	for _, label := range []string{"API key", "api_key", "Api-Key", "Private key", "SSH private key", "DB password", "Auth Token"} {
		m := chatrelay.Message{Interaction: &chatrelay.Interaction{Details: []chatrelay.Detail{{Label: label, Value: value}}},
			Card: &chatrelay.Card{Blocks: []chatrelay.Block{{Type: "fields", Fields: []chatrelay.Detail{{Label: label, Value: value}}}}}}
		r, _ := chatrelay.RedactMessage(m)
		assert.Equal(t, label+": the detail's value", r.Interaction.Details[0].Value, "[redacted]")
		assert.Equal(t, label+": the field's value", r.Card.Blocks[0].Fields[0].Value, "[redacted]")
	}
	for _, label := range []string{"API", "keys", "private", "rapid key rotation"} {
		m := chatrelay.Message{Card: &chatrelay.Card{Blocks: []chatrelay.Block{{Type: "fields", Fields: []chatrelay.Detail{{Label: label, Value: value}}}}}}
		r, _ := chatrelay.RedactMessage(m)
		assert.Equal(t, label+": the field's value", r.Card.Blocks[0].Fields[0].Value, value)
	}
}

// fuzzSecrets are secrets of the contract's shapes, each with the part
// that must never survive (the part that is not kept, like a key's name).
var fuzzSecrets = []struct{ secret, body string }{
	{"sk-proj-AbCdEfGhIjKlMnOpQrStUv123", "AbCdEfGhIjKlMnOpQrStUv123"},
	{"ghp_abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnopqrstuvwxyz0123456789"},
	{"github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "11ABCDEFG0123456789_abcdefghijklmnop"},
	{"AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"},
	{"xoxb-123456789012-1234567890123-AbCdEfGhIjKl", "123456789012-1234567890123"},
	{"xoxe-1-My0xLTEyMzQ1Njc4OTAx", "My0xLTEyMzQ1Njc4OTAx"},
	{"xapp-1-A0123456789-0123456789-abcdef", "A0123456789-0123456789"},
	{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r", "dBjftJeZ4CVPmB92K27uhbUJU1p1r"},
	{"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA"},
	{"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0AAAAB\n-----END PGP PRIVATE KEY BLOCK-----", "lQOYBF0AAAAB"},
	{"chp_" + strings.Repeat("Q", 43), strings.Repeat("Q", 43)},
	{"cha_" + strings.Repeat("W", 43), strings.Repeat("W", 43)},
	{"whsec_WStz26hFnOV/l1SC/CikcIo3hZYaoPG/Qv+xylPvKug=", "WStz26hFnOV/l1SC/CikcIo3hZYaoPG/Qv+xylPvKug"},
	{"f2.0123456789abcdef.p_1a2b3c4d.at_0123456789ab.1796320541401.3JE0b6DiFZhPZMwdPFsv7qDzDTIbSkYG9Fyw0P0Xf-_", "3JE0b6DiFZhPZMwdPFsv7qDzDTIbSkYG9Fyw0P0Xf-_"},
	{strings.Repeat("a1b2c3d4", 8), strings.Repeat("a1b2c3d4", 8)},
	{"DB_PASSWORD=hunter2hunter2", "hunter2hunter2"},
	{`{"api_key": "v4lue-v4lue"}`, "v4lue-v4lue"},
	{"Authorization: Bearer opaque.opaque-123456", "opaque.opaque-123456"},
	{"https://bob:s3cr3t@pass@git.example.com/x", "s3cr3t@pass"},
	{"redis://:s3cr3tpass@127.0.0.1:6379", "s3cr3tpass"},
}

// FuzzRedact: redaction never panics; what it returns from valid UTF-8 is
// valid UTF-8; it is idempotent, redacting twice is redacting once (and
// since Redact changes every secret shape it finds, that says no shape is
// left in what it returns); and a secret of every shape planted anywhere
// in any text, set apart by spaces, does not survive: its secret part
// occurs in the result no more often than the text around it holds it.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"", "password=x", "https://a:b@c", strings.Repeat("a", 64), "-----BEGIN PRIVATE KEY-----",
		"chp_" + strings.Repeat("Q", 43) + "chp_" + strings.Repeat("Q", 43), `{"token": "a\"b", "x": 'y'}`, "secret: '", "Bearer ",
		"x_" + strings.Repeat("f", 64) + "_" + strings.Repeat("f", 64), "a://b:[redacted]@c@d", "token=\"[redacted]\" x"} {
		f.Add(s, uint8(len(s)), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, s string, pick uint8, at uint16) {
		r := chatrelay.Redact(s)
		if utf8.ValidString(s) && !utf8.ValidString(r) {
			t.Fatalf("Redact(%q) = %q, not valid UTF-8", s, r)
		}
		if again := chatrelay.Redact(r); again != r {
			t.Fatalf("not idempotent: %q → %q → %q", s, r, again)
		}
		i := int(at) % (len(s) + 1)
		for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
			i--
		}
		sec := fuzzSecrets[int(pick)%len(fuzzSecrets)]
		prefix, suffix := s[:i], s[i:]
		planted := chatrelay.Redact(prefix + " " + sec.secret + " " + suffix)
		if strings.Count(planted, sec.body) > strings.Count(prefix, sec.body)+strings.Count(suffix, sec.body) {
			t.Fatalf("the secret %q survives in %q + %q: %q", sec.secret, prefix, suffix, planted)
		}
	})
}

// TestCleanName: a name keeps no line break, control character, [ ] < >,
// or invisible format character (bidi controls, zero width characters,
// byte order marks), so no name can forge an attribution line or draw
// itself reversed.
func TestCleanName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"Alex", "Alex"},
		{"Alex\nhermes: approved", "Alex hermes: approved"},
		{"[hermes] <b>Boss</b>", "hermes bBoss/b"},
		{"Alex \u202etsoh eht", "Alex tsoh eht"},
		{"\u202bAlex\u202c \u2067Bo\u2069", "Alex Bo"},
		{"Al\u200bex\u200c\u200d\u2060\ufeff", "Alex"},
		{"\u200eAlex\u200f\u061c", "Alex"},
		{"zero\u200bwidth\u2028line", "zerowidth line"},
		{"Zoë Ångström", "Zoë Ångström"},
		{"أحمد", "أحمد"},
		{"ㅤAlexㅤㅤBoᅟᅠ", "Alex Bo"}, // blank fillers, as white space
		{"⠀ﾠAlex", "Alex"},
		{"한글", "한글"},
	} {
		got, err := chatrelay.CleanName(tc.in)
		assert.Success(t, err)
		assert.Equal(t, "CleanName("+strconv.QuoteToASCII(tc.in)+")", got, tc.want)
	}
	for _, in := range []string{"", " ", "\u202e", "\u200b\ufeff\u2066\u2069", "[<>]", "a\xffb", "\u3164", "\u115f\u1160\uffa0\u2800"} {
		_, err := chatrelay.CleanName(in)
		assert.Code(t, err, chatrelay.InvalidName)
	}
}

// FuzzCleanName: a name is untrusted. Cleaning never panics; what it keeps
// is valid UTF-8 of 1 … 64 code points with no line break, control
// character, [ ] < >, leading, trailing or doubled space; and cleaning it
// again changes nothing.
func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"Alex", "Alex\nhermes: ok", "[hermes]", " <b> ", strings.Repeat("é", 100), "a\u2028b", "\xff\xfe", "a  \t b", "Alex \u202etsoh eht", "\u2066\u200b\ufeff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := chatrelay.CleanName(name)
		if err != nil {
			if chatrelay.CodeOf(err) != chatrelay.InvalidName {
				t.Fatalf("CleanName(%q): %v", name, err)
			}
			return
		}
		n := utf8.RuneCountInString(got)
		if !utf8.ValidString(got) || n < 1 || n > 64 || strings.ContainsAny(got, "[]<>\n\r\t") || strings.Contains(got, "  ") ||
			strings.TrimSpace(got) != got {
			t.Fatalf("CleanName(%q) = %q", name, got)
		}
		for _, r := range got {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("CleanName(%q) = %q keeps a control or format character", name, got)
			}
		}
		if again, err := chatrelay.CleanName(got); err != nil || again != got {
			t.Fatalf("CleanName(%q) = %q, again %q %v", name, got, again, err)
		}
	})
}

// TestRedactKeepsLimits: a redaction that lengthens a text at its limit
// is cut back to it, so a participant's view keeps every limit.
func TestRedactKeepsLimits(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("password=x\n", chatrelay.MaxText/11) + "end"
	text = string([]rune(text)[:chatrelay.MaxText])
	r, _ := chatrelay.RedactMessage(chatrelay.Message{Text: text})
	n := utf8.RuneCountInString(r.Text)
	assert.True(t, n == chatrelay.MaxText && strings.HasSuffix(r.Text, "…") && strings.Contains(r.Text, "password=[redacted]"), "%d code points", n)
}

// TestRedactInteractionText: an approval's detail whose label is
// secret-named ("DB password for prod") has its value redacted whole in
// the v2 details, and so in the message's text too, the v1 rendering of
// the same interaction ("- DB password for prod: …"), which every view
// carries: the value matched no secret shape there (no "=" or ":" right
// after the name), and a participant read it in the text beside the
// redacted detail.
func TestRedactInteractionText(t *testing.T) {
	t.Parallel()
	const value = "hunter2hunter2"
	for _, label := range []string{"DB password for prod", "API key (staging)", "Secret"} {
		ask := chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Details: []chatrelay.Detail{{Label: label, Value: value}, {Label: "build", Value: "412"}}}
		ix := ask.Interaction(time.Now())
		m := chatrelay.Message{Author: chatrelay.Hermes, Text: ix.RenderText(), Interaction: ix}
		r, changed := chatrelay.RedactMessage(m)
		assert.True(t, changed, "%s: a message with a secret detail reported unchanged", label)
		assert.Equal(t, label+": the detail's value", r.Interaction.Details[0].Value, "[redacted]")
		assert.True(t, !strings.Contains(r.Text, value), "%s: the text shows the detail's value: %q", label, r.Text)
		assert.True(t, strings.Contains(r.Text, "- "+label+": [redacted]\n- build: 412\n"), "%s: the text is not the redacted rendering: %q", label, r.Text)
		assert.Equal(t, label+": the stored text", m.Text, ix.RenderText())
	}
}

// TestRedactSecretLabelEchoed: the value of a detail or card field whose
// label is secret-named is redacted whole, and so wherever else the
// message holds it: a card's fallback_text (the message's text, all a v1
// client reads) that lists the fields as "label: value" lines, or a
// prompt that names the value again. The fallback's "DB password for
// prod: hunter2hunter2" matched no shape (no "=" or ":" right after the
// name) and showed a participant the value the card's field hid. A value
// under 4 characters ("on") is not looked for elsewhere: it would redact
// ordinary words.
func TestRedactSecretLabelEchoed(t *testing.T) {
	t.Parallel()
	const value = "hunter2hunter2"
	fallback := "Deploy report\n- DB password for prod: " + value + "\n- Token rotation: on\n- build: 412"
	card := chatrelay.Message{Author: chatrelay.Hermes, Text: fallback, Card: &chatrelay.Card{FallbackText: fallback, Blocks: []chatrelay.Block{
		{Type: chatrelay.FieldsBlock, Fields: []chatrelay.Detail{{Label: "DB password for prod", Value: value}, {Label: "Token rotation", Value: "on"}, {Label: "build", Value: "412"}}},
		{Type: chatrelay.TextBlock, Text: "Rotate " + value + " (" + value + "x stays: another word) after the deploy."}}}}
	r, changed := chatrelay.RedactMessage(card)
	assert.True(t, changed, "a card with a secret field reported unchanged")
	want := "Deploy report\n- DB password for prod: [redacted]\n- Token rotation: on\n- build: 412"
	assert.Equal(t, "the card's text", r.Text, want)
	assert.Equal(t, "the card's fallback_text", r.Card.FallbackText, want)
	assert.Equal(t, "the text block", r.Card.Blocks[1].Text, "Rotate [redacted] ("+value+"x stays: another word) after the deploy.")
	assert.Equal(t, "the short value", r.Card.Blocks[0].Fields[1].Value, "[redacted]")

	ask := chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Rotate " + value + " after the deploy?", Details: []chatrelay.Detail{{Label: "API key", Value: value}}}
	ix := ask.Interaction(time.Now())
	m := chatrelay.Message{Author: chatrelay.Hermes, Text: ix.RenderText(), Interaction: ix}
	r, _ = chatrelay.RedactMessage(m)
	assert.Equal(t, "the prompt", r.Interaction.Prompt, "Rotate [redacted] after the deploy?")
	for _, js := range []string{string(chatrelay.MarshalMessage(r)), string(chatrelay.MarshalMessageV2(r))} {
		assert.True(t, !strings.Contains(js, value), "a participant reads the value: %s", js)
	}
	assert.Equal(t, "the stored prompt", m.Interaction.Prompt, "Rotate "+value+" after the deploy?")
}

// TestRedactCutLeavesNoShape: a string cut back to its field's limit ends
// with "…", and the cut can end a shape there: "AKIA" and the first 16 of
// a longer run, or 64 of 66 hex characters, is an AWS key id or a thread
// token once "…" follows it. The participant's view redacts that too, so
// that redacting it again changes nothing.
func TestRedactCutLeavesNoShape(t *testing.T) {
	t.Parallel()
	akia := strings.Repeat("x", chatrelay.LimitAttachmentName.Max-22) + " AKIA" + strings.Repeat("B", 16) + "Z tail"
	hex := strings.Repeat("x", chatrelay.LimitAttachmentName.Max-66) + " " + strings.Repeat("ab", 33)
	m := chatrelay.Message{Text: "files", Attachments: []chatrelay.Attachment{{Name: akia}, {Name: hex}}}
	r, _ := chatrelay.RedactMessage(m)
	for _, a := range r.Attachments {
		assert.True(t, utf8.RuneCountInString(a.Name) <= chatrelay.LimitAttachmentName.Max, "%d code points", utf8.RuneCountInString(a.Name))
		assert.Equal(t, "the name redacted again", chatrelay.Redact(a.Name), a.Name)
	}
	again, _ := chatrelay.RedactMessage(r)
	assert.Equal(t, "the view redacted again", string(chatrelay.MarshalMessageV2(again)), string(chatrelay.MarshalMessageV2(r)))

	// A value redacted, then cut ("password=[redacted]…", "[redacte…"):
	// redacted again, it lost its "…" (the value ran to the end of the
	// line and was not "[redacted]"), and read as a whole text.
	for n := range 11 {
		text := string([]rune(strings.Repeat("password=x\n", chatrelay.MaxText/11+1))[n : n+chatrelay.MaxText])
		r, _ := chatrelay.RedactMessage(chatrelay.Message{Text: text})
		again, _ := chatrelay.RedactMessage(r)
		assert.True(t, strings.HasSuffix(r.Text, "…") && utf8.RuneCountInString(r.Text) == chatrelay.MaxText, "cut at %d: %q", n, r.Text[len(r.Text)-30:])
		assert.Equal(t, fmt.Sprintf("cut at %d, redacted again", n), again.Text, r.Text)
	}
}

// TestRedactToAsAMessage: RedactTo reads a string as RedactMessage does
// the same string in a field of the same limit: a participant's name in
// whoami is the name a message's author_name shows, and redacted again it
// is the same, even where the cut to the limit ends a shape (AKIA and 16
// of a longer run: RedactTo left it whole before its "…").
func TestRedactToAsAMessage(t *testing.T) {
	t.Parallel()
	name := strings.Repeat("n", chatrelay.LimitName.Max-22) + " AKIA" + strings.Repeat("B", 16) + "Z tail"
	r, _ := chatrelay.RedactMessage(chatrelay.Message{Text: "hi", AuthorName: name})
	got := chatrelay.RedactTo(name, chatrelay.LimitName)
	assert.Equal(t, "the name as RedactTo reads it", got, r.AuthorName)
	assert.Equal(t, "the name redacted again", chatrelay.RedactTo(got, chatrelay.LimitName), got)
}
