package redisstore

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
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// attachBytes is the content of upload i of worker w: a size from 1 byte
// to 300 KiB (more than one APPEND chunk), different for each.
func attachBytes(w, i int) []byte {
	n := 1 + (w*7919+i*104729)%(300<<10)
	b := bytes.Repeat([]byte(fmt.Sprintf("%d.%d;", w, i)), n/4+1)
	return b[:n]
}

// attachChild is a node that uploads and posts from 20 goroutines at once
// into $CHATRELAY_TEST_THREAD on the Redis at $CHATRELAY_TEST_REDIS (under
// $CHATRELAY_TEST_PREFIX) until it is killed, printing "upload <id>
// <sha256>" for each acknowledged upload and "post <message id> <id>" for
// each acknowledged post naming it.
func attachChild() int {
	thread := os.Getenv("CHATRELAY_TEST_THREAD")
	st, err := Open(context.Background(), os.Getenv("CHATRELAY_TEST_REDIS"), Options{Prefix: os.Getenv("CHATRELAY_TEST_PREFIX"),
		Retention: chatrelay.Retention{Messages: 100000}, Log: slog.New(slog.DiscardHandler)})
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
				a, err := st.PutAttachment(context.Background(), thread, store.Upload{Name: fmt.Sprintf("w%d-%d.bin", w, i), Body: bytes.NewReader(attachBytes(w, i))})
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

// TestKilledNodeLeavesWholeAttachments: SIGKILL of a node during 20
// concurrent uploads and posts: every acknowledged attachment is whole
// (its SHA-256 matches), every message names only attachments that
// exist, and what the killed uploads staged expires.
func TestKilledNodeLeavesWholeAttachments(t *testing.T) {
	t.Parallel()
	r := redistest.StartServer(t, redistest.ServerOptions{})
	const thread, prefix = "a77ac4ed0a77ac4e", "crash:"
	uploads := map[string]string{} // id -> sha256
	posts := map[string]string{}   // message id -> attachment id
	for _, killAfter := range []int{40, 90} {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CHATRELAY_TEST_CHILD=attach", "CHATRELAY_TEST_REDIS="+r.URL(),
			"CHATRELAY_TEST_PREFIX="+prefix, "CHATRELAY_TEST_THREAD="+thread)
		cmd.Stderr = os.Stderr
		start, err := cmd.StdinPipe()
		assert.Success(t, err)
		out, err := cmd.StdoutPipe()
		assert.Success(t, err)
		assert.Success(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		start.Close()
		n, killed := 0, false
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			assert.True(t, len(f) == 3 && f[0] != "error", "child: %q", sc.Text())
			if f[0] == "upload" {
				uploads[f[1]] = f[2]
			} else {
				posts[f[1]] = f[2]
			}
			if n++; n == killAfter {
				assert.Success(t, cmd.Process.Kill()) // SIGKILL, mid-flight
				killed = true
			}
		}
		assert.True(t, killed, "the child stopped by itself after %d lines", n)
		cmd.Wait()
	}

	st := openStore(t, r, Options{Prefix: prefix})
	read := func(id string) string {
		_, f, err := st.OpenAttachment(context.Background(), thread, id)
		assert.Success(t, err)
		defer f.Close()
		h := sha256.New()
		_, err = io.Copy(h, f)
		assert.Success(t, err)
		return hex.EncodeToString(h.Sum(nil))
	}
	for id, sum := range uploads {
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
	for id := range posts {
		assert.True(t, stored[id], "acknowledged post %s is missing", id)
	}
	assert.True(t, len(posts) > 0 && len(uploads) > 0, "nothing acknowledged: %d uploads, %d posts", len(uploads), len(posts))
	// A killed upload's staging key expires.
	staged, err := st.rdb.Keys(context.Background(), prefix+"{"+thread+"}:att:up:*").Result()
	assert.Success(t, err)
	for _, k := range staged {
		ttl, err := st.rdb.PTTL(context.Background(), k).Result()
		assert.Success(t, err)
		assert.True(t, ttl > 0 && ttl <= stagingTTL, "staging key %s expires in %v", k, ttl)
	}
}
