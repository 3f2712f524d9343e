package main

import (
	"strings"
	"testing"

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
