package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestCheckWaitFailsAtOnceOnAFolderItCannotOpen: check --wait looks again
// for a store it cannot reach (a Redis restarting) for up to 5 minutes; a
// data folder that is a file will not become one by waiting, so the wait
// fails at once with its code rather than say it looks again. The
// context is canceled before the run: a look again would end at its first
// turn, after it said it would look.
func TestCheckWaitFailsAtOnceOnAFolderItCannotOpen(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "afile")
	assert.Success(t, os.WriteFile(file, nil, 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb strings.Builder
	err := run(ctx, []string{"check", threadOld, "ix_000000000000", "--wait", "--data", file}, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
	assert.True(t, err != nil && strings.Contains(err.Error(), "store_unavailable"), "check --wait on a data folder that is a file: %v, want store_unavailable", err)
	assert.True(t, !strings.Contains(errb.String(), "looking again"), "a data folder that is a file is waited for: %s", errb.String())
}
