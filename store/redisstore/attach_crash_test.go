package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/attachcrash"
	"github.com/chatrelay/chatrelay/internal/redistest"
)

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
	attachcrash.Work(st, thread, os.Stdout)
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
	var acked attachcrash.Acked
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
		attachcrash.Collect(t, out, killAfter, cmd.Process.Kill, &acked)
		cmd.Wait()
	}

	st := openStore(t, r, Options{Prefix: prefix})
	attachcrash.Check(t, st, thread, acked)
	// A killed upload's staging key expires.
	staged, err := st.rdb.Keys(context.Background(), prefix+"{"+thread+"}:att:up:*").Result()
	assert.Success(t, err)
	for _, k := range staged {
		ttl, err := st.rdb.PTTL(context.Background(), k).Result()
		assert.Success(t, err)
		assert.True(t, ttl > 0 && ttl <= stagingTTL, "staging key %s expires in %v", k, ttl)
	}
}
