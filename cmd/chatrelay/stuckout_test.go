package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// runStuck runs args with a standard output that blocks (a pipe nobody
// reads) at the first line holding stuckAt, calls during once that line is
// blocked, then stops the command (SIGTERM) and returns how it ended; it
// fails the test if the command still runs 10 s after the stop.
func runStuck(t *testing.T, stuckAt string, during func(), args ...string) (stderr string, err error) {
	t.Helper()
	out := &stuckWriter{stuckAt: stuckAt, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(out.release) }) // the blocked write returns, at last
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var errout lockedBuffer
	ended := make(chan error, 1)
	go func() { ended <- run(ctx, args, env(nil), strings.NewReader(""), out, &errout) }()
	if during != nil {
		during()
	}
	select {
	case <-out.entered:
	case err := <-ended:
		t.Fatalf("%s ended before its line was written: %v; stderr: %s", args[0], err, errout.String())
	}
	stop() // SIGTERM
	select {
	case err := <-ended:
		return errout.String(), err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still runs 10 s after SIGTERM, with a line stuck on its standard output", args[0])
	}
	return "", nil
}

// TestWatchStopsWithALineStuck: `chatrelay watch` whose consumer stopped
// reading its standard output (a line's write blocks on the full pipe)
// ends at SIGTERM with its documented exit status 0, as mcp does. It hung
// until SIGKILL: the write never returned.
func TestWatchStopsWithALineStuck(t *testing.T) {
	t.Parallel()
	data := seed(t)
	stderr, err := runStuck(t, "a reply nobody reads", func() {
		// The reply is stored once watch listens (it may be printed by
		// the start's read of the store or by the feed: either way once).
		r := runCLI(t, nil, "", "reply", threadOld, "a reply nobody reads", "--data", data, "--fsync", "never")
		assert.Success(t, r.err)
	}, "watch", "--all", "--since", "1", "--data", data)
	assert.True(t, err == nil, "watch stopped with a line stuck: %v (exit %d); stderr: %s", err, exitCode(err), stderr)
}

// TestAskWaitStopsWithTheOutcomeStuck: `chatrelay ask --wait` told to stop
// cancels its question and exits 12 (canceled) even when the outcome's
// line cannot be written (its reader reads no more): the exit status says
// the outcome. It hung until SIGKILL.
func TestAskWaitStopsWithTheOutcomeStuck(t *testing.T) {
	t.Parallel()
	data := seed(t)
	var stopped error
	out := &stuckWriter{stuckAt: `"canceled"`, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(out.release) })
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr lockedBuffer
	ended := make(chan error, 1)
	go func() {
		ended <- run(ctx, []string{"ask", threadOld, "--approval", "deploy?", "--wait", "--data", data, "--fsync", "never"}, env(nil), strings.NewReader(""), out, &stderr)
	}()
	for !strings.Contains(stderr.String(), "waiting for interaction") { // it asked and waits
		select {
		case err := <-ended:
			t.Fatalf("ask ended before it waited: %v; stderr: %s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop() // SIGTERM: cancel the question, print the outcome (stuck)
	select {
	case stopped = <-ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("ask --wait still runs 10 s after SIGTERM, with its outcome stuck on its standard output")
	}
	assert.True(t, exitCode(stopped) == 12, "ask --wait stopped with its outcome stuck: %v (exit %d), want 12; stderr: %s", stopped, exitCode(stopped), stderr.String())
	r := runCLI(t, nil, "", "show", threadOld, "--v2", "--json", "--data", data)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, `"canceled"`), "the question is canceled: %s", r.stdout)
}

// TestSubscribeStopsWithALineStuck: `chatrelay subscribe` whose consumer
// stopped reading its standard output ends at SIGTERM with its documented
// exit status 0, as watch does.
func TestSubscribeStopsWithALineStuck(t *testing.T) {
	t.Parallel()
	sa := []string{"--data", t.TempDir()}
	n := serveMCP(t, sa)
	owner := opsToken("subscribe stuck")
	assert.Equal(t, "post", personPost(t, n.base, owner, chatrelay.PathPost, `{"text":"a line nobody reads"}`), 201)
	stderr, err := runStuck(t, "a line nobody reads", nil, "subscribe", "--server", n.base, "--token", owner)
	assert.True(t, err == nil, "subscribe stopped with a line stuck: %v (exit %d); stderr: %s", err, exitCode(err), stderr)
}
