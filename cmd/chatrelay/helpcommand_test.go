package main

import (
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestHelpCommandIsItsHelp: chatrelay help serve prints serve's flags, as
// chatrelay serve --help does (exit 0, on standard output); it printed the
// list of commands and dropped the operand, so a user who typed it, as
// git help and go help teach, never saw a flag. An unknown one is a usage
// error.
func TestHelpCommandIsItsHelp(t *testing.T) {
	t.Parallel()
	want := runCLI(t, nil, "", "serve", "--help")
	got := runCLI(t, nil, "", "help", "serve")
	assert.Equal(t, "help serve exit code", exitCode(got.err), 0)
	assert.True(t, strings.Contains(got.stdout, "-max-threads"), "help serve printed:\n%s", got.stdout)
	assert.Equal(t, "help serve", got.stdout, want.stdout)
	r := runCLI(t, nil, "", "help", "bogus")
	assert.Equal(t, "help bogus exit code", exitCode(r.err), 2)
}
