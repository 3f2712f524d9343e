package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
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

// TestInterruptDuringAFailingStoreCall: an interrupt that comes while a
// store call of the wait is in flight, and that call then fails (a read
// of a Redis that stopped answering ends at its own timeout, not at the
// interrupt), is still the user's interrupt: the question is withdrawn or
// said to be still pending. Before, the wait's store failure was reported
// alone (a CI run of a2f38eb: TestInterruptWithTheStoreDownSaysStillPending
// got "store_unavailable: … redis changes: … i/o timeout").
func TestInterruptDuringAFailingStoreCall(t *testing.T) {
	interrupted, cancel := context.WithCancel(t.Context())
	cancel()
	down := chatrelay.Errorf(chatrelay.StoreUnavailable, "the store cannot be reached")
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"interrupted: canceled", interrupted, context.Canceled, true},
		{"interrupted: a store call failed", interrupted, down, true},
		{"interrupted: an outcome reached", interrupted, nil, false},
		{"interrupted: another error", interrupted, errors.New("interaction closed"), false},
		{"not interrupted: a store call failed", t.Context(), down, false},
	} {
		assert.Equal(t, c.name, interruptedWait(c.ctx, c.err), c.want)
	}
}
