package chatrelay_test

import (
	"strings"
	"testing"
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
		{"thread token", "my token is " + hex64, "my token is [redacted]"},
		{"password=", "password=hunter2 and more", "password=[redacted] and more"},
		{"passwd:", "passwd: hunter2", "passwd: [redacted]"},
		{"secret=", "SECRET=abc123", "SECRET=[redacted]"},
		{"token:", "token: 'abc def'", "token: [redacted]"},
		{"api_key", "api_key=AbC123, next", "api_key=[redacted], next"},
		{"api-key", `api-key: "quoted value"`, "api-key: [redacted]"},
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
		{"plain text", "Deploy build 412 to production?", "Deploy build 412 to production?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, "redacted", chatrelay.Redact(tc.in), tc.want)
		})
	}
}

// TestRedactMessage: every string of a v2 message a participant reads is
// redacted; the message given is not changed.
func TestRedactMessage(t *testing.T) {
	t.Parallel()
	key := "sk-proj-AbCdEfGhIjKlMnOpQrStUv123"
	m := chatrelay.Message{Text: "t " + key,
		Interaction: &chatrelay.Interaction{Title: key, Prompt: key, Choices: []chatrelay.Choice{{Value: key, Label: key, Description: key}},
			Details: []chatrelay.Detail{{Label: "k", Value: key}}, Answer: &chatrelay.Answer{Value: key}},
		Card: &chatrelay.Card{Title: key, FallbackText: key, Blocks: []chatrelay.Block{{Type: "text", Text: key},
			{Type: "fields", Fields: []chatrelay.Detail{{Label: key, Value: key}}}, {Type: "link", URL: "https://u:" + key + "@x.example", Label: key}}}}
	r, changed := chatrelay.RedactMessage(m)
	assert.True(t, changed, "a message with secrets reported unchanged")
	js := string(chatrelay.MarshalMessageV2(r))
	assert.True(t, !strings.Contains(js, "AbCdEfGh"), "a secret left: %s", js)
	assert.True(t, strings.Count(js, "[redacted]") >= 13, "redactions: %s", js)
	assert.True(t, strings.Contains(string(chatrelay.MarshalMessageV2(m)), key), "the stored message was changed")
}

// FuzzRedact: redaction never panics, never leaves a thread token, and is
// idempotent.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"", "password=x", "https://a:b@c", strings.Repeat("a", 64), "-----BEGIN PRIVATE KEY-----"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := chatrelay.Redact(s)
		if again := chatrelay.Redact(r); again != r {
			t.Fatalf("not idempotent: %q → %q → %q", s, r, again)
		}
	})
}

// FuzzCleanName: a name is untrusted. Cleaning never panics; what it keeps
// is valid UTF-8 of 1 … 64 code points with no line break, control
// character, [ ] < >, leading, trailing or doubled space; and cleaning it
// again changes nothing.
func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"Alex", "Alex\nhermes: ok", "[hermes]", " <b> ", strings.Repeat("é", 100), "a\u2028b", "\xff\xfe", "a  \t b"} {
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
			if unicode.IsControl(r) {
				t.Fatalf("CleanName(%q) = %q keeps a control character", name, got)
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
	text := strings.Repeat("password=x ", chatrelay.MaxText/11) + "end"
	text = string([]rune(text)[:chatrelay.MaxText])
	r, _ := chatrelay.RedactMessage(chatrelay.Message{Text: text})
	n := utf8.RuneCountInString(r.Text)
	assert.True(t, n == chatrelay.MaxText && strings.HasSuffix(r.Text, "…") && strings.Contains(r.Text, "password=[redacted]"), "%d code points", n)
}
