package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestVersion: a binary built from this checkout (with the VCS stamp, as
// `go build` and `go install` make by default) says its revision and Go
// version in one line.
func TestVersion(t *testing.T) {
	t.Parallel()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD (the test needs a git checkout): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "chatrelay")
	out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	out, err = exec.Command(bin, "version").Output()
	assert.Success(t, err)
	line := strings.TrimSuffix(string(out), "\n")
	assert.True(t, !strings.Contains(line, "\n"), "more than one line: %q", line)
	assert.True(t, strings.HasPrefix(line, "chatrelay "), "%q", line)
	assert.True(t, strings.Contains(line, " "+string(head[:12])), "no revision %.12s in %q", head, line)
	assert.True(t, strings.HasSuffix(line, " "+runtime.Version()), "no Go version in %q", line)
	assert.Equal(t, "version with an operand: exit status", exitCode(runCLI(t, nil, "", "version", "x").err), 2)
}
