// Package attachcrash is the SIGKILL test of attachments that both store
// backends run: a child process uploads and posts from 20 goroutines at
// once until it is killed, printing what was acknowledged; the parent
// kills it mid-flight and checks that every acknowledged attachment is
// whole and every message names only attachments that exist.
package attachcrash

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// Bytes is the content of upload i of worker w: a size from 1 byte to
// 300 KiB (more than one of Redis's chunks), different for each.
func Bytes(w, i int) []byte {
	n := 1 + (w*7919+i*104729)%(300<<10)
	b := bytes.Repeat([]byte(fmt.Sprintf("%d.%d;", w, i)), n/4+1)
	return b[:n]
}

// Writer is what the child writes through.
type Writer interface {
	PutAttachment(ctx context.Context, thread string, up store.Upload) (chatrelay.Attachment, error)
	Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error)
}

// Work uploads and posts into thread from 20 goroutines at once until one
// fails, writing to out "upload <id> <sha256>" for each acknowledged
// upload and "post <message id> <id>" for each acknowledged post naming
// it, each line written as soon as it is acknowledged (out unbuffered).
func Work(st Writer, thread string, out io.Writer) {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Go(func() {
			for i := 0; ; i++ {
				a, err := st.PutAttachment(context.Background(), thread, store.Upload{Name: fmt.Sprintf("w%d-%d.bin", w, i), Body: bytes.NewReader(Bytes(w, i))})
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
}

// Acked is what a child acknowledged.
type Acked struct {
	Uploads map[string]string // attachment id -> sha256
	Posts   map[string]string // message id -> attachment id
}

// Collect reads a child's lines from out into acked, and calls kill
// (SIGKILL) once it has read killAfter of them; the child must not stop
// by itself.
func Collect(t *testing.T, out io.Reader, killAfter int, kill func() error, acked *Acked) {
	t.Helper()
	if acked.Uploads == nil {
		acked.Uploads, acked.Posts = map[string]string{}, map[string]string{}
	}
	n, killed := 0, false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		assert.True(t, len(f) == 3 && f[0] != "error", "child: %q", sc.Text())
		if f[0] == "upload" {
			acked.Uploads[f[1]] = f[2]
		} else {
			acked.Posts[f[1]] = f[2]
		}
		if n++; n == killAfter {
			assert.Success(t, kill()) // SIGKILL, mid-flight
			killed = true
		}
	}
	assert.True(t, killed, "the child stopped by itself after %d lines", n)
}

// Reader is what the parent checks through.
type Reader interface {
	OpenAttachment(ctx context.Context, thread, id, reader string) (chatrelay.Attachment, io.ReadSeekCloser, error)
	Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error)
}

// Check asserts that every acknowledged upload reads back whole, every
// stored message's attachments read back whole, and every acknowledged
// post is stored.
func Check(t *testing.T, st Reader, thread string, acked Acked) {
	t.Helper()
	read := func(id string) string {
		_, f, err := st.OpenAttachment(context.Background(), thread, id, "")
		assert.Success(t, err)
		defer f.Close()
		h := sha256.New()
		_, err = io.Copy(h, f)
		assert.Success(t, err)
		return hex.EncodeToString(h.Sum(nil))
	}
	for id, sum := range acked.Uploads {
		assert.Equal(t, "sha256 of acknowledged upload "+id, read(id), sum)
	}
	p, err := st.Changes(context.Background(), thread, 0, 0)
	assert.Success(t, err)
	stored := map[string]bool{}
	for _, e := range p.Messages {
		stored[e.ID] = true
		for _, a := range e.Attachments {
			assert.Equal(t, "sha256 of the attachment of "+e.ID, read(a.ID), a.SHA256)
		}
	}
	for id := range acked.Posts {
		assert.True(t, stored[id], "acknowledged post %s is missing", id)
	}
	assert.True(t, len(acked.Posts) > 0 && len(acked.Uploads) > 0, "nothing acknowledged: %d uploads, %d posts", len(acked.Uploads), len(acked.Posts))
}
