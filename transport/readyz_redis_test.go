package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestReadyzRedisRefusesWrites: /readyz says why while its Redis answers
// PING but refuses every write (before an earlier fix its check was a
// PING, which said nothing). A read-only replica (READONLY) is this
// node's trouble (a failover left it on the old primary): not ready (503),
// so that the load balancer sends to the other nodes. A full Redis
// (maxmemory with noeviction: OOM) is every node's alike, and polls and
// streams go on: ready (200, "store":"full"), as with a full disk on the
// file store; before, 503 on every node took them all out of rotation and
// stopped the reads that still worked. Once Redis takes writes again, the
// store is ok.
func TestReadyzRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t, storetest.ServerOptions{})
	admin := srv.Client(t)
	ctx := context.Background()
	n := startRedisNode(t, srv, storetest.NewPrefix(), storetest.Options{})
	n.mustPost(tokenN(1), "before")
	var last struct {
		status int
		body   string
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last /readyz: %d %s", last.status, last.body)
		}
	})
	ready := func(what string, want int, reason string) {
		t.Helper()
		assert.Eventually(t, 10*time.Second, what, func() bool { // (the feed may take a moment to be live)
			status, _, body := n.do(http.MethodGet, "/readyz", "", "", nil)
			last.status, last.body = status, string(body)
			var r struct {
				Store      string `json:"store"`
				StoreError string `json:"store_error"`
			}
			assert.Success(t, json.Unmarshal(body, &r))
			return status == want && r.StoreError == reason
		})
	}
	ready("ready at first", http.StatusOK, "")

	// Full: maxmemory under what it uses, noeviction.
	redistest.Fill(t, admin)
	status, _, _ := n.do(http.MethodPost, "/api/chat/post", tokenN(1), `{"text":"while full"}`, nil)
	assert.Equal(t, "a post to a full Redis", status, http.StatusServiceUnavailable)
	ready("full: still ready, polls go on", http.StatusOK, "Redis out of memory")
	assert.True(t, strings.Contains(last.body, `"store":"full"`), "readyz while full: %s", last.body)
	status, _, _ = n.do(http.MethodGet, "/api/chat/poll", tokenN(1), "", nil)
	assert.Equal(t, "a poll of a full Redis", status, http.StatusOK)
	assert.Success(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	ready("room again", http.StatusOK, "")

	// A read-only replica: of a master that is not there (a loopback port
	// of this test's range that nothing listens on).
	assert.Success(t, admin.Do(ctx, "REPLICAOF", "127.0.0.1", "47399").Err())
	t.Cleanup(func() { admin.Do(context.Background(), "REPLICAOF", "NO", "ONE") })
	ready("read-only replica", http.StatusServiceUnavailable, "Redis read-only")
	assert.Success(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	ready("a master again", http.StatusOK, "")
	n.mustPost(tokenN(1), "after")
}

// TestRedisFullStillAnswersPolls: while Redis is full (maxmemory with
// noeviction), a person can still read their conversation: a v1 poll, with
// and without a cursor, and a v2 poll answer 200 with what is stored, and
// a stream resumed from its cursor sends what it missed; a post answers
// 503 store_unavailable, retryable, and stores nothing. Before, the polls
// and streams answered 503 as well: their reads were MULTIs, which a full
// Redis refuses. Once Redis has room, posts work again.
func TestRedisFullStillAnswersPolls(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t, storetest.ServerOptions{})
	admin := srv.Client(t)
	ctx := context.Background()
	n := startRedisNode(t, srv, storetest.NewPrefix(), storetest.Options{})
	tok := tokenN(1)
	first, second := n.mustPost(tok, "first"), n.mustPost(tok, "second")
	viewer := n.invite(tok, `{"name":"Bo","role":"viewer","kind":"human"}`) // never used yet: its first use is a write

	redistest.Fill(t, admin)

	p := n.poll(tok, 0)
	assert.Equal(t, "v1 poll of the full Redis: messages", len(p.Messages), 2)
	assert.Equal(t, "v1 poll: the first", decodeMessage(t, p.Messages[0]).ID, first.ID)
	assert.Equal(t, "v1 poll: cursor", p.Cursor, second.Epoch)
	p = n.poll(tok, first.Epoch)
	assert.Equal(t, "v1 poll with a cursor: messages", len(p.Messages), 1)
	assert.Equal(t, "v1 poll with a cursor: the second", decodeMessage(t, p.Messages[0]).ID, second.ID)
	v2 := n.pollV2(tok, 0)
	assert.Equal(t, "v2 poll of the full Redis: messages", len(v2.Messages), 2)
	status, body := n.asParticipant(http.MethodGet, "/api/chat/poll?v=2", viewer.Token, "")
	assert.Equal(t, "a participant's poll of the full Redis "+string(body), status, http.StatusOK)
	assert.Success(t, json.Unmarshal(body, &v2))
	assert.Equal(t, "a participant's poll: messages", len(v2.Messages), 2)

	status, _, body = n.do(http.MethodPost, "/api/chat/post", tok, `{"text":"while full"}`, nil)
	assert.Equal(t, "a post to the full Redis", status, http.StatusServiceUnavailable)
	e := decodeError(t, body)
	assert.Equal(t, "its code", e.Code, "store_unavailable")
	assert.Equal(t, "retryable", e.Retryable, true)
	// A stream resumed from the first message: its lease is a write, but a
	// script that has written once (the lease's cleanup of expired ones)
	// may go on writing, so Redis takes it; its backlog is read as a poll.
	resumed := n.mustSSE("/api/chat/stream", tok, map[string]string{"Last-Event-ID": strconv.FormatInt(first.Epoch, 10)})
	assert.Equal(t, "resumed SSE ready", resumed.nextEvent(t).Event, "ready")
	assert.Equal(t, "resumed SSE: the second", resumed.nextEvent(t).ID, strconv.FormatInt(second.Epoch, 10))
	resumed.Close()
	assert.Equal(t, "after the refused post", len(n.poll(tok, 0).Messages), 2)

	assert.Success(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	third := n.mustPost(tok, "room again")
	p = n.poll(tok, second.Epoch)
	assert.Equal(t, "after room again: messages", len(p.Messages), 1)
	assert.Equal(t, "after room again: the new one", decodeMessage(t, p.Messages[0]).ID, third.ID)
	n.mustSSE("/api/chat/stream", tok, nil)
}
