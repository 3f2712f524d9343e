package redisstore

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonString writes what encoding/json writes (HTML left alone), for the
// plain text of most posts and for everything it escapes.
func TestJSONStringAsEncoder(t *testing.T) {
	for _, s := range []string{
		"", "operator", "a message of a typical length, about sixty characters long.",
		`a "quote"`, `back\slash`, "tab\there", "new\nline", "nul\x00", "del\x7f", "<b>&</b>",
		"é café", "emoji 😀", "line\u2028sep\u2029", "bad \xff utf-8", "~ tilde",
	} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got, want := jsonString(s), strings.TrimSuffix(b.String(), "\n"); got != want {
			t.Errorf("jsonString(%q) = %s, want %s", s, got, want)
		}
		// A pair (a post's author and text) is each one's jsonString,
		// whether it is plain or not.
		for _, other := range []string{"", "agent", `a "quote"`} {
			if a, b := jsonStrings(other, s); a != jsonString(other) || b != jsonString(s) {
				t.Errorf("jsonStrings(%q, %q) = %s, %s", other, s, a, b)
			}
			if a, b := jsonStrings(s, other); a != jsonString(s) || b != jsonString(other) {
				t.Errorf("jsonStrings(%q, %q) = %s, %s", s, other, a, b)
			}
		}
	}
}
