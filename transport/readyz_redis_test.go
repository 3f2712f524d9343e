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
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestReadyzRedisRefusesWrites: /readyz says the node is not ready, and
// why, while its Redis answers PING but refuses every write: full
// (maxmemory with noeviction: OOM) or a read-only replica (READONLY), as
// it does while its disk is full on the file store. Before, its check was
// a PING, which both answer: 200 while every post got 503. Once Redis
// takes writes again, it is ready.
func TestReadyzRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t, storetest.ServerOptions{})
	admin := srv.Client(t)
	ctx := context.Background()
	n := startRedisNode(t, srv, storetest.NewPrefix(), storetest.Options{})
	n.mustPost(tokenN(1), "before")
	ready := func(what string, want int, reason string) {
		t.Helper()
		assert.Eventually(t, 10*time.Second, what, func() bool { // (the feed may take a moment to be live)
			status, _, body := n.do(http.MethodGet, "/readyz", "", "", nil)
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
	mem := 0
	for _, line := range strings.Split(admin.Info(ctx, "memory").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			mem, _ = strconv.Atoi(v)
		}
	}
	assert.Success(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	assert.Success(t, admin.ConfigSet(ctx, "maxmemory", strconv.Itoa(mem/2)).Err())
	status, _, _ := n.do(http.MethodPost, "/api/chat/post", tokenN(1), `{"text":"while full"}`, nil)
	assert.Equal(t, "a post to a full Redis", status, http.StatusServiceUnavailable)
	ready("full", http.StatusServiceUnavailable, "Redis out of memory")
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
