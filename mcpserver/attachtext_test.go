package mcpserver_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestTheTextNamesAttachments: the text a tool answers for the model (what
// most clients show it, beside the structured content) names a message's
// files, one "[attachment: NAME (SIZE)]" line each, as a v1 reader sees
// them: a message that is only a file was an empty line, so an agent
// reading the thread never learned that the person had sent a log.
func TestTheTextNamesAttachments(t *testing.T) {
	e := newEnv(t)
	file := map[string]any{"name": "build.log", "type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("FAIL\n"))}
	ok[map[string]any](t, e, "send", map[string]any{"thread": thread, "text": "", "attachments": []any{file}})
	read := text(e.call(t, t.Context(), "read_thread", map[string]any{"thread": thread}))
	assert.True(t, strings.Contains(read, "hermes at ") && strings.Contains(read, ": [attachment: build.log (5 B)]"),
		"read_thread's text does not name the file:\n%s", read)
}
