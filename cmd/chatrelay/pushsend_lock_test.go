package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestPushSendOneSenderAFolder: on the file store one process sends a
// folder's pushes (its claims are in its memory): a push send beside a
// server that sends them itself is refused, naming it, and so is a second
// push send beside a first; with the first stopped, another may start.
// Before, both ran, and each push went out twice.
func TestPushSendOneSenderAFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A push send that is not refused runs until stopped: 30 s, then the
	// test fails rather than hangs.
	refused := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, chatrelayBinary(t), "push", "send", "--data", dir)
		cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
		out, err := cmd.CombinedOutput()
		assert.True(t, ctx.Err() == nil && err != nil && strings.Contains(string(out), "has its pushes sent by "+what+" (pid"),
			"push send beside %s: %v\n%s", what, err, out)
	}
	_, srv := serveProc(t, "", []string{"--data", dir, "--fsync", "never"})
	refused("chatrelay serve")
	srv.Process.Kill()
	srv.Wait()

	first := exec.Command(chatrelayBinary(t), "push", "send", "--data", dir)
	first.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
	var log lockedBuffer
	first.Stderr = &log
	assert.Success(t, first.Start())
	t.Cleanup(func() { first.Process.Kill(); first.Wait() })
	assert.Eventually(t, time.Minute, "the first push send running", func() bool {
		return strings.Contains(log.String(), "push sender running")
	})
	refused("chatrelay push send")
	first.Process.Kill()
	first.Wait()
	_, again := serveProc(t, "", []string{"--data", dir, "--fsync", "never"}) // its lock let go: a server takes it
	again.Process.Kill()
	again.Wait()
}
