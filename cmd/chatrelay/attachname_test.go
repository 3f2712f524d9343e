package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// pipePath is a pipe that holds body, by the path bash gives <(cmd):
// /dev/fd/N.
func pipePath(t *testing.T, body string) string {
	t.Helper()
	r, w, err := os.Pipe()
	assert.Success(t, err)
	t.Cleanup(func() { r.Close() })
	_, err = w.WriteString(body)
	assert.Success(t, err)
	assert.Success(t, w.Close())
	return fmt.Sprintf("/dev/fd/%d", r.Fd())
}

// TestAttachAPipeByName: `reply --attach <(git diff)` would name the
// attachment "63" (the base of /dev/fd/63): it is refused, exit 2, naming
// --attach-as, and nothing is stored; `--attach-as NAME=FILE` names it,
// in the order of the flags, and types it by NAME's extension.
func TestAttachAPipeByName(t *testing.T) {
	t.Parallel()
	data := seed(t)
	p := pipePath(t, "diff --git a/x b/x\n")
	r := runCLI(t, nil, "", "reply", threadOld, "the diff, unnamed", "--attach", p, "--data", data, "--fsync", "never")
	assert.Equal(t, "exit code", exitCode(r.err), 2)
	assert.True(t, r.err != nil && strings.Contains(r.err.Error(), "--attach-as NAME="+p), "the error: %v", r.err)
	s := runCLI(t, nil, "", "show", threadOld, "--json", "--data", data)
	assert.True(t, !strings.Contains(s.stdout, "the diff, unnamed"), "a refused reply was stored: %s", s.stdout)

	file := t.TempDir() + "/notes.txt"
	assert.Success(t, os.WriteFile(file, []byte("notes"), 0o600))
	r = runCLI(t, nil, "", "reply", threadOld, "the diff", "--attach", file, "--attach-as", "change.diff="+p, "--data", data, "--fsync", "never")
	assert.Success(t, r.err)
	s = runCLI(t, nil, "", "show", threadOld, "--json", "--data", data)
	i, j := strings.Index(s.stdout, "[attachment: notes.txt ("), strings.Index(s.stdout, "[attachment: change.diff (")
	assert.True(t, i >= 0 && j > i, "the reply's attachments, in the flags' order: %s", s.stdout)
	assert.True(t, !strings.Contains(s.stdout, "[attachment: "+p[len("/dev/fd/"):]+" ("), "a pipe named by its descriptor: %s", s.stdout)

	// A file --attach-as names that does not open: the error names the
	// option as given (it named --attach, which the command had not).
	r = runCLI(t, nil, "", "reply", threadOld, "a missing file", "--attach-as", "log.txt="+file+".missing", "--data", data, "--fsync", "never")
	assert.Equal(t, "a missing --attach-as file: exit code", exitCode(r.err), 2)
	assert.True(t, r.err != nil && strings.Contains(r.err.Error(), "--attach-as log.txt="+file+".missing: "), "the error: %v", r.err)

	for _, bad := range []string{"=" + file, "no-name-given", "name="} {
		r = runCLI(t, nil, "", "reply", threadOld, "bad "+bad, "--attach-as", bad, "--data", data, "--fsync", "never")
		assert.Equal(t, "--attach-as "+bad+": exit code", exitCode(r.err), 2)
	}
}
