package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
)

// TestCheckWaitStartedWhileTheStoreIsDown: a store that cannot be reached
// for a while (a Redis restarting) does not end check --wait, as
// docs/cli.md says; started during the restart, it ended at once (exit 1,
// store_unavailable) where the same outage a second later was waited out.
// It looks again until the store answers, then waits for the outcome.
func TestCheckWaitStartedWhileTheStoreIsDown(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	storeArgs := []string{"--store", srv.URL()}
	r := runCLI(t, nil, "", append([]string{"open", "--title", "deploy"}, storeArgs...)...)
	assert.Success(t, r.err)
	thread := r.stdout[strings.Index(r.stdout, `"thread":"`)+10:][:16]
	r = runCLI(t, nil, "", append([]string{"ask", thread, "--approval", "Deploy?"}, storeArgs...)...)
	assert.Success(t, r.err)
	id := r.stdout[strings.Index(r.stdout, `"id":"ix_`)+6:][:15]

	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stderr := &lockedBuffer{}
	done := make(chan cliResult, 1)
	go func() {
		var stdout bytes.Buffer
		err := run(ctx, append([]string{"check", thread, id, "--wait"}, storeArgs...), env(nil), strings.NewReader(""), &stdout, stderr)
		done <- cliResult{err: err, stdout: stdout.String()}
	}()
	assert.Eventually(t, 20*time.Second, "check --wait says it looks again", func() bool {
		select {
		case res := <-done:
			t.Fatalf("check --wait ended with the store down: exit %d, %v", exitCode(res.err), res.err)
		default:
		}
		return strings.Contains(stderr.String(), "looking again")
	})
	srv.Restart(t)
	r = runCLI(t, nil, "", append([]string{"cancel", thread, id}, storeArgs...)...)
	assert.Success(t, r.err)
	res := <-done
	assert.Equal(t, "exit code (canceled)", exitCode(res.err), 12)
	assert.True(t, strings.Contains(res.stdout, `"state":"canceled"`), "printed %q", res.stdout)
}
