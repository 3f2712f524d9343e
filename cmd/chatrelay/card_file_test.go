package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestCardRefusesAFileItCannotRead: card's FILE that is missing or a
// folder is a bad command line (exit 2, naming it), as reply --attach
// refuses one; it was exit 1 with the bare error of the open or the read
// ("chatrelay: read DIR: is a directory"), with no code and no word of
// which operand was wrong.
func TestCardRefusesAFileItCannotRead(t *testing.T) {
	t.Parallel()
	data := seed(t)
	for _, name := range []string{filepath.Join(t.TempDir(), "missing.json"), t.TempDir()} {
		r := runCLI(t, nil, "", "card", "--data", data, "--fsync", "never", threadOld, name)
		assert.Equal(t, name+" exit code", exitCode(r.err), 2)
		assert.True(t, r.err != nil && strings.Contains(r.err.Error(), "FILE "+name), "error: %v", r.err)
	}
	_, err := os.Stat(data)
	assert.Success(t, err)
}
