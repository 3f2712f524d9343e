package transport

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// checkSeen is a store whose Check records the context it was given.
type checkSeen struct {
	store.Store
	err      error // the context's Err as Check began
	deadline time.Duration
}

func (c *checkSeen) Check(ctx context.Context) error {
	c.err = ctx.Err()
	if d, ok := ctx.Deadline(); ok {
		c.deadline = time.Until(d)
	}
	return nil
}

// TestReadyzCheckOutlivesItsProbe: the store check of /readyz runs to its
// own end (readyzTimeout), whatever the probe does: a probe that hangs up
// first (a Kubernetes probe's 1 s timeout against the check's 2 s) must
// not cancel it, or a shard cut off is never found down (a canceled check
// marks nothing: it is the caller's giving up).
func TestReadyzCheckOutlivesItsProbe(t *testing.T) {
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	seen := &checkSeen{Store: st}
	s := NewServer(Config{Store: seen, TicketKey: []byte(strings.Repeat("k", 32)), Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the probe hung up
	s.handleReadyz(httptest.NewRecorder(), httptest.NewRequest("GET", "/readyz", nil).WithContext(ctx))
	if seen.err != nil {
		t.Errorf("the check began with its context ended (%v): the probe's hang-up canceled it", seen.err)
	}
	if seen.deadline <= 0 || seen.deadline > readyzTimeout {
		t.Errorf("the check's deadline is %v away, want within readyzTimeout (%v)", seen.deadline, readyzTimeout)
	}
}
