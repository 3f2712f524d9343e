package main

import (
	"strings"
	"testing"
	"unicode"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestShowWritesNoControlSequence: `chatrelay show` prints a message's
// text with its control characters as spaces (line breaks and tabs
// kept), as `list` does: anyone holding a token can post a text, and an
// escape sequence in it reached the host's terminal as is (one that sets
// the clipboard, or moves the cursor up and erases a line to hide or forge
// a message).
func TestShowWritesNoControlSequence(t *testing.T) {
	t.Parallel()
	data := seed(t)
	text := "hello \x1b]52;c;ZWNobyBwd25lZA==\a\x1b[1A\x1b[2K\rforged\u009b31m\tend\nsecond line"
	r := runCLI(t, nil, "", "reply", "--data", data, "--fsync", "never", threadOld, text)
	assert.Success(t, r.err)
	r = runCLI(t, nil, "", "show", "--data", data, threadOld)
	assert.Success(t, r.err)
	assert.True(t, !strings.ContainsAny(r.stdout, "\x1b\a\r\u009b"), "show wrote a control character:\n%q", r.stdout)
	assert.True(t, strings.Contains(r.stdout, "    hello  ]52;c;ZWNobyBwd25lZA==  [1A [2K forged 31m\tend\n    second line\n"), "show changed more than the control characters:\n%q", r.stdout)
}

// TestListAndShowWriteNoBidiOverride: a text may hold Unicode's
// bidirectional formatting characters (a right-to-left override shows
// "evil" as "live"); list and show print them as spaces, as they print
// control characters, so that what the host reads is what is stored, in
// its order. A new title may not hold one (invalid_text).
func TestListAndShowWriteNoBidiOverride(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	r := runCLI(t, nil, "", "open", "--data", data, "--fsync", "never", "--title", "deploy \u202elive\u202c now", "--text", "hi")
	assert.Equal(t, "open with a bidi override in its title: exit status", exitCode(r.err), 1)
	assert.True(t, strings.Contains(r.err.Error(), "invalid_text"), "open's refusal: %v", r.err)
	r = runCLI(t, nil, "", "open", "--data", data, "--fsync", "never", "--title", "deploy now", "--text", "run \u2066rm -rf\u2069 ok \u202elive\u202c")
	assert.Success(t, r.err)
	r = runCLI(t, nil, "", "list", "--data", data)
	assert.Success(t, r.err)
	thread := strings.Fields(strings.Split(r.stdout, "\n")[1])[0]
	for _, cmd := range [][]string{{"list", "--data", data}, {"show", "--data", data, thread}} {
		r := runCLI(t, nil, "", cmd...)
		assert.Success(t, r.err)
		assert.True(t, !strings.ContainsFunc(r.stdout, func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }),
			"%s wrote a bidirectional formatting character:\n%q", cmd[0], r.stdout)
		assert.True(t, strings.Contains(r.stdout, "rm -rf"), "%s changed more than those characters:\n%q", cmd[0], r.stdout)
	}
}
