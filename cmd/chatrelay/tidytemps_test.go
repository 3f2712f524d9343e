package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestCLIRemovesItsStaleTemps: a CLI write killed mid-write leaves a temp
// file (the thread's whole document: its messages) beside the document.
// Only a server's sweep removed them, so on a host where only the CLI
// runs they stayed for good. The CLI now removes the temp files of the
// thread it writes, under that thread's lock (no live writer's), and no
// other file: another thread's temp (its lock not held) and an upload's
// stay.
func TestCLIRemovesItsStaleTemps(t *testing.T) {
	t.Parallel()
	data := seed(t)
	chat := filepath.Join(data, "chat")
	mine := []string{"." + threadOld + ".json.tmp-dead1", "." + threadOld + ".participants.json.tmp-dead2"}
	others := []string{"." + threadNew + ".json.tmp-dead3", "." + threadOld + ".upload.tmp-live4"}
	// Beside the documents (a binary older than the temp folder) and in
	// the temp folder (chat/.tmp), where a document's temp file is made.
	mine = append(mine, ".tmp/."+threadOld+".json.tmp-dead5")
	others = append(others, ".tmp/."+threadNew+".json.tmp-dead6")
	assert.Success(t, os.MkdirAll(filepath.Join(chat, ".tmp"), 0o700))
	for _, name := range append(append([]string{}, mine...), others...) {
		assert.Success(t, os.WriteFile(filepath.Join(chat, name), []byte(`{"version":1,"messages":[{"text":"secret"}]}`), 0o600))
	}
	r := runCLI(t, nil, "", "reply", threadOld, "an answer", "--data", data)
	assert.Success(t, r.err)
	for _, name := range mine {
		_, err := os.Lstat(filepath.Join(chat, name))
		assert.True(t, os.IsNotExist(err), "the stale temp %s of the thread written is still there (%v)", name, err)
	}
	for _, name := range others {
		_, err := os.Lstat(filepath.Join(chat, name))
		assert.Success(t, err)
	}
}
