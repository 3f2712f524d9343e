package main

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// fullWriter is a standard output that takes nothing: a full disk
// (`> /dev/full`), a pipe whose reader is gone with SIGPIPE ignored.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestOutputNotWrittenIsAnError: a command whose answer could not be
// written to standard output fails (exit 1), never exits 0 as if it had been
// read; above all share and device, whose link is shown this once, say
// which link went unseen so that it can be revoked.
func TestOutputNotWrittenIsAnError(t *testing.T) {
	data := seed(t)
	store := []string{"--data", data, "--fsync", "never"}
	for _, args := range [][]string{
		{"show", threadOld, "--data", data},
		append([]string{"share", threadOld, "--name", "Alex"}, store...),
		{"share", "audit", threadOld, "--data", data},
		append([]string{"device", threadOld, "--name", "Phone"}, store...),
		append([]string{"push", "rotate-key"}, store...),
		{"help"},
	} {
		var stderr strings.Builder
		err := run(t.Context(), args, env(nil), strings.NewReader(""), fullWriter{}, &stderr)
		assert.True(t, errors.Is(err, syscall.ENOSPC), "%q with standard output full: %v", args, err)
		assert.Equal(t, "exit status of "+strings.Join(args, " "), exitCode(err), 1)
	}
	var stderr strings.Builder
	err := run(t.Context(), []string{"share", threadOld, "--name", "Sam", "--data", data, "--fsync", "never"}, env(nil), strings.NewReader(""), fullWriter{}, &stderr)
	assert.True(t, err != nil && strings.Contains(err.Error(), "share revoke "+threadOld+" p_"), "the unseen link is named, to revoke: %v", err)
}

// failingOnce is a standard output that refuses its first write and
// records that it was written to (serve's "listening on").
type failingOnce struct{ wrote chan struct{} }

func (f failingOnce) Write([]byte) (int, error) {
	select {
	case f.wrote <- struct{}{}:
	default:
	}
	return 0, syscall.EBADF
}

// TestServeIgnoresItsStandardOutput: serve, started with no one reading
// its standard output (closed by a service manager), serves on and, at
// SIGTERM, shuts down with exit status 0: only what a command answers on
// standard output counts in its exit status.
func TestServeIgnoresItsStandardOutput(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := failingOnce{wrote: make(chan struct{}, 1)}
	var stderr lockedBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--fsync", "never"}, env(nil), strings.NewReader(""), out, &stderr)
	}()
	select {
	case <-out.wrote:
	case err := <-errc:
		t.Fatalf("serve ended before it listened: %v; log:\n%s", err, stderr.String())
	}
	cancel() // as SIGTERM does
	err := <-errc
	assert.Success(t, err)
}
