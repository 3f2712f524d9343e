package transport_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestPostNotAcknowledgedUntilReplicated: a node whose store URL says
// wait-replicas=1 answers a post 503 store_unavailable (Retry-After: 1)
// while the primary's only replica is stopped, and 201 again once it is
// back; a node on the same Redis without the setting answers the same
// post 201 meanwhile, stored on the primary alone.
func TestPostNotAcknowledgedUntilReplicated(t *testing.T) {
	t.Parallel()
	primary := redistest.StartServer(t, redistest.ServerOptions{})
	replica := primary.StartReplica(t)
	be := storetest.OpenRedisWith(t, primary, storetest.NewPrefix(), storetest.Options{}, "?wait-replicas=1&wait-timeout=300ms")
	waiting := startPush(t, pushOptions{on: be})
	plain := startPush(t, pushOptions{on: storetest.OpenRedis(t, primary, be.Prefix, storetest.Options{})})
	tok := tokenN(1)
	waiting.mustPost(tok, "while the replica runs")

	replica.Stop(t)
	status, hdr, body := waiting.postAs(tok, "192.0.2.1", "not on any replica")
	assert.True(t, status == http.StatusServiceUnavailable && strings.Contains(string(body), `"store_unavailable"`) && hdr.Get("Retry-After") == "1",
		"a post no replica holds: %d %v %s", status, hdr, body)
	plain.mustPost(tok, "acknowledged without waiting")

	replica.Cont()
	// As a client would, following Retry-After: the replica catches up
	// in its own time on a busy machine.
	assert.Eventually(t, 10*time.Second, "a post acknowledged once the replica is back", func() bool {
		status, _, _ := waiting.postAs(tok, "192.0.2.2", "after the replica is back")
		return status == http.StatusCreated
	})
}
