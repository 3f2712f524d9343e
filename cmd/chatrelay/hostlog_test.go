package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestHostCommandLogsToItsStderrAtWarn: a host command's store writes its
// records to the command's standard error at warn and above, never at info
// through the process's default logger, so that `chatrelay push
// rotate-key` says what it did in its own words (one "chatrelay:" line)
// rather than with a store's info line ("made the VAPID key") before it.
// Not parallel: it swaps slog's default logger to see what reaches it.
func TestHostCommandLogsToItsStderrAtWarn(t *testing.T) {
	var def bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)

	data := t.TempDir()
	r := runCLI(t, nil, "", "push", "rotate-key", "--data", data)
	assert.Success(t, r.err)
	assert.True(t, len(strings.TrimSpace(r.stdout)) == 87, "rotate-key printed %q, want the public key", r.stdout)
	assert.True(t, def.Len() == 0, "the store logged through the process's default logger:\n%s", def.String())
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		assert.True(t, strings.HasPrefix(l, "chatrelay: "), "rotate-key's standard error holds a line not its own: %q", l)
	}
}
