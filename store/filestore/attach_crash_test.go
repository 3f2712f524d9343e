package filestore_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/attachcrash"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// attachChild uploads and posts from 20 goroutines at once into
// $CHATRELAY_TEST_THREAD until it is killed, printing "upload <id>
// <sha256>" for each acknowledged upload and "post <message id> <id>" for
// each acknowledged post naming it.
func attachChild() int {
	data, thread := os.Getenv("CHATRELAY_TEST_DATA"), os.Getenv("CHATRELAY_TEST_THREAD")
	st, err := filestore.OpenFile(data, filestore.FileOptions{Retention: chatrelay.Retention{Messages: 100000}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	bufio.NewReader(os.Stdin).ReadString('\n')
	attachcrash.Work(st, thread, os.Stdout)
	return 1
}

// TestKilledUploaderLeavesWholeAttachments: SIGKILL during 20 concurrent
// uploads and posts: every acknowledged attachment is whole (its SHA-256
// matches), every message names only attachments that exist, and a sweep
// an hour later leaves no temp file.
func TestKilledUploaderLeavesWholeAttachments(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const thread = "a77ac4ed0a77ac4e"
	var acked attachcrash.Acked
	for _, killAfter := range []int{40, 90} {
		w := startChild(t, "attach", data, thread, "attach")
		w.start.Close()
		attachcrash.Collect(t, w.out, killAfter, w.cmd.Process.Kill, &acked)
		w.cmd.Wait()
	}

	st, err := filestore.OpenFile(data, filestore.FileOptions{Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer st.Close()
	attachcrash.Check(t, st, thread, acked)

	// An hour later a sweep leaves no temp file of a killed upload.
	later, err := filestore.OpenFile(data, filestore.FileOptions{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer later.Close()
	_, err = later.Sweep(context.Background())
	assert.Success(t, err)
	tmps, _ := filepath.Glob(filepath.Join(data, "chat", ".*.tmp-*"))
	assert.Equal(t, "temp files", tmps, []string(nil))
}
