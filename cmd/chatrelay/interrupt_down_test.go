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

// TestInterruptWithTheStoreDownSaysStillPending: ask --wait promises that
// an interrupt cancels the question; when the cancel cannot be written (Redis
// is down), it said only "store_unavailable: … redis changes: …", so the
// user believed the question withdrawn while a person could still answer
// it. It says the interaction may still be pending, and how to cancel it.
func TestInterruptWithTheStoreDownSaysStillPending(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	storeArgs := []string{"--store", srv.URL()}
	r := runCLI(t, nil, "", append([]string{"open", "--title", "deploy"}, storeArgs...)...)
	assert.Success(t, r.err)
	thread := r.stdout[strings.Index(r.stdout, `"thread":"`)+10:][:16]

	ctx, cancel := context.WithCancel(t.Context()) // as signal.NotifyContext does at Ctrl-C
	defer cancel()
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		var stdout bytes.Buffer
		done <- run(ctx, append([]string{"ask", thread, "--approval", "Deploy?", "--wait"}, storeArgs...), env(nil), strings.NewReader(""), &stdout, stderr)
	}()
	assert.Eventually(t, 10*time.Second, "the wait began", func() bool { return strings.Contains(stderr.String(), "waiting for interaction") })
	id := stderr.String()[strings.Index(stderr.String(), "ix_"):][:15]
	// The store stops answering (SIGSTOP: its connections stay, as a
	// frozen machine's or a partition's), then the interrupt: a killed
	// Redis ended the wait's feed with EOF, which could come before the
	// interrupt and end the wait as a store failure, with no interrupt
	// to report (a CI run of a9fbc97).
	srv.Stop(t)
	cancel()
	err := <-done
	assert.Equal(t, "exit code", exitCode(err), 1)
	assert.True(t, err != nil && strings.Contains(err.Error(), id) && strings.Contains(err.Error(), "still be pending") &&
		strings.Contains(err.Error(), "chatrelay cancel "+thread+" "+id), "the error: %v", err)
}
