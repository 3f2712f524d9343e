package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestShowNamesAttachments: `chatrelay show` prints a message's files, one
// "[attachment: NAME (SIZE)]" line each under its text, as a v1 poll and
// `show --json` read them; it printed a message that is only a file as an
// empty line, so the host never saw that the person had sent one.
func TestShowNamesAttachments(t *testing.T) {
	t.Parallel()
	data := seed(t)
	file := filepath.Join(t.TempDir(), "build.log")
	assert.Success(t, os.WriteFile(file, []byte("FAIL\n"), 0o600))
	r := runCLI(t, nil, "", "reply", "--data", data, "--fsync", "never", threadOld, "", "--attach", file)
	assert.Success(t, r.err)
	r = runCLI(t, nil, "", "show", "--data", data, threadOld)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "\n    [attachment: build.log (5 B)]\n"), "show does not name the file:\n%s", r.stdout)
}

// TestListNamesAFileAsTheLastMessage: `chatrelay list` shows a thread
// whose newest message is only a file by the file's line, as a v1 poll
// reads it, not "-" as if the message were empty.
func TestListNamesAFileAsTheLastMessage(t *testing.T) {
	t.Parallel()
	data := seed(t)
	file := filepath.Join(t.TempDir(), "build.log")
	assert.Success(t, os.WriteFile(file, []byte("FAIL\n"), 0o600))
	r := runCLI(t, nil, "", "reply", "--data", data, "--fsync", "never", threadOld, "", "--attach", file)
	assert.Success(t, r.err)
	r = runCLI(t, nil, "", "list", "--data", data)
	assert.Success(t, r.err)
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, threadOld) {
			assert.True(t, strings.HasSuffix(line, "[attachment: build.log (5 B)]"), "list's last message: %q", line)
			return
		}
	}
	t.Fatalf("list has no line for %s:\n%s", threadOld, r.stdout)
}
