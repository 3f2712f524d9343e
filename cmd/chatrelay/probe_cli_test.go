package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestReportSaysNoExitStatus: an outcome in the exit status (ask and
// check --wait: 10 denied, 11 expired, 12 canceled) is the answer, not an
// error; main wrote "chatrelay: exit status 10" to standard error under
// the outcome's JSON, as if the command had failed.
func TestReportSaysNoExitStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"success", nil, ""},
		{"help", flag.ErrHelp, ""},
		{"denied", exitStatus(10), ""},
		{"an error", usageError("reply takes THREAD and TEXT"), "chatrelay: reply takes THREAD and TEXT\n"},
	} {
		var b bytes.Buffer
		report(&b, tc.err)
		assert.Equal(t, tc.name, b.String(), tc.want)
	}
}

// TestAttachRefusesADirectory: --attach naming a folder is refused before
// anything is stored, as a missing file is (exit 2, naming the flag);
// it was opened, and its read failed mid-upload as "invalid_attachment:
// the upload broke off before its end", which says nothing of the folder.
func TestAttachRefusesADirectory(t *testing.T) {
	t.Parallel()
	data := seed(t)
	dir := t.TempDir()
	r := runCLI(t, nil, "", "reply", "--data", data, "--fsync", "never", threadOld, "x", "--attach", dir)
	assert.Equal(t, "exit code", exitCode(r.err), 2)
	assert.True(t, strings.Contains(r.err.Error(), "--attach "+dir) && strings.Contains(r.err.Error(), "is a folder"), "error: %v", r.err)
	_, err := os.Stat(filepath.Join(data, "chat", threadOld+".files"))
	assert.True(t, os.IsNotExist(err), "a folder of files was made: %v", err)
}
