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

	first := startPushSend(t, dir)
	refused("chatrelay push send")
	first.Process.Kill()
	first.Wait()
	_, again := serveProc(t, "", []string{"--data", dir, "--fsync", "never"}) // its lock let go: a server takes it
	again.Process.Kill()
	again.Wait()
}

// TestServeDoesNotWaitForAChildThatExited: serve --push-sender=process
// waits for its child's feed before it serves (a post stored before then
// would not be pushed), but not for a child that has already exited: one
// refused because another push send has the folder's pushes waited out
// the whole 30 s bound, and serve's requests with it (probe15).
func TestServeDoesNotWaitForAChildThatExited(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	startPushSend(t, dir)

	srv := exec.Command(chatrelayBinary(t), "serve", "--addr", "127.0.0.1:0", "--data", dir, "--fsync", "never", "--push-sender", "process")
	srv.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
	var log lockedBuffer
	srv.Stderr = &log
	assert.Success(t, srv.Start())
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	// Either line comes: the one for a child that exited at once, or,
	// 30 s in, the one for a child still not ready.
	assert.Eventually(t, time.Minute, "serve serving", func() bool {
		return strings.Contains(log.String(), "serving all the same")
	})
	assert.True(t, strings.Contains(log.String(), "push sender: exited before its feed was live"),
		"serve waited for a child that had exited:\n%s", log.String())
}

// startPushSend runs chatrelay push send on the folder dir, returning once
// it sends the folder's pushes; it is killed at the test's end.
func startPushSend(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(chatrelayBinary(t), "push", "send", "--data", dir)
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
	var log lockedBuffer
	cmd.Stderr = &log
	assert.Success(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	assert.Eventually(t, time.Minute, "push send running", func() bool {
		return strings.Contains(log.String(), "push sender running")
	})
	return cmd
}
