package filestore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// attachBytes is the content of upload i of worker w: a size from 1 byte
// to 300 KiB, different for each.
func attachBytes(w, i int) []byte {
	n := 1 + (w*7919+i*104729)%(300<<10)
	b := bytes.Repeat([]byte(fmt.Sprintf("%d.%d;", w, i)), n/4+1)
	return b[:n]
}

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
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...) // unbuffered: acknowledged once the parent can read it
	}
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Go(func() {
			for i := 0; ; i++ {
				body := attachBytes(w, i)
				a, err := st.PutAttachment(context.Background(), thread, store.Upload{Name: fmt.Sprintf("w%d-%d.bin", w, i), Body: bytes.NewReader(body)})
				if err != nil {
					say("error %s", chatrelay.CodeOf(err))
					return
				}
				say("upload %s %s", a.ID, a.SHA256)
				e, err := st.Append(context.Background(), thread, store.NewMessage{Text: "file", Attachments: []string{a.ID}})
				if err != nil {
					say("error %s", chatrelay.CodeOf(err))
					return
				}
				say("post %s %s", e.ID, a.ID)
			}
		})
	}
	wg.Wait()
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
	uploads := map[string]string{} // id -> sha256
	posts := map[string]string{}   // message id -> attachment id
	for _, killAfter := range []int{40, 90} {
		w := startChild(t, "attach", data, thread, "attach")
		w.start.Close()
		n, killed := 0, false
		sc := bufio.NewScanner(w.out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			assert.True(t, len(f) == 3 && f[0] != "error", "child: %q", sc.Text())
			if f[0] == "upload" {
				uploads[f[1]] = f[2]
			} else {
				posts[f[1]] = f[2]
			}
			if n++; n == killAfter {
				assert.Success(t, w.cmd.Process.Kill()) // SIGKILL, mid-flight
				killed = true
			}
		}
		assert.True(t, killed, "the child stopped by itself after %d lines", n)
		w.cmd.Wait()
	}

	st, err := filestore.OpenFile(data, filestore.FileOptions{Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer st.Close()
	read := func(id string) (chatrelay.Attachment, string, error) {
		a, f, err := st.OpenAttachment(context.Background(), thread, id)
		if err != nil {
			return a, "", err
		}
		defer f.Close()
		h := sha256.New()
		_, err = io.Copy(h, f)
		return a, hex.EncodeToString(h.Sum(nil)), err
	}
	for id, sum := range uploads {
		_, got, err := read(id)
		assert.Success(t, err)
		assert.Equal(t, "sha256 of acknowledged upload "+id, got, sum)
	}
	p, err := st.Changes(context.Background(), thread, 0, 0)
	assert.Success(t, err)
	stored := map[string]bool{}
	for _, e := range p.Messages {
		stored[e.ID] = true
		for _, a := range e.Attachments {
			_, got, err := read(a.ID)
			assert.Success(t, err)
			assert.Equal(t, "sha256 of the attachment of "+e.ID, got, a.SHA256)
		}
	}
	for id := range posts {
		assert.True(t, stored[id], "acknowledged post %s is missing", id)
	}
	assert.True(t, len(posts) > 0 && len(uploads) > 0, "nothing acknowledged: %d uploads, %d posts", len(uploads), len(posts))

	// An hour later a sweep leaves no temp file of a killed upload.
	later, err := filestore.OpenFile(data, filestore.FileOptions{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer later.Close()
	_, err = later.Sweep(context.Background())
	assert.Success(t, err)
	tmps, _ := filepath.Glob(filepath.Join(data, "chat", ".*.tmp-*"))
	assert.Equal(t, "temp files", tmps, []string(nil))
}
