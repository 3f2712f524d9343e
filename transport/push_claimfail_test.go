package transport_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// claimsFailFirst is a node's store whose first push claim fails as
// the store does when Redis is out of reach for a moment (a reset
// connection, a cut, a failover of the claims' shard).
type claimsFailFirst struct {
	store.Store
	store.Push
	failed atomic.Bool
}

func (c *claimsFailFirst) ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	if c.failed.CompareAndSwap(false, true) {
		return false, false, errors.New("store_unavailable: the store cannot be reached: redis push claim: EOF")
	}
	return c.Push.ClaimPush(ctx, id, owner, lease, doc)
}

// TestPushClaimFailureRetried: the store cannot take a change's push
// claim at that moment (found by the cluster probe: shard 0 cut for 4 s
// while approvals opened, and every node dropped the same pushes); the
// claim is tried again, and the push is sent once, not dropped.
func TestPushClaimFailureRetried(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		fail := &claimsFailFirst{}
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			withPush(svc, nil)(c)
			fail.Store, fail.Push = c.Store, store.PushOf(c.Store)
			c.Store = fail
		}})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		status, _ := e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		assert.Equal(t, "subscribe", status, http.StatusCreated)
		_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
		assert.Success(t, err)
		_, pls := awaitPushes(t, svc, "/push/owner", 1)
		assert.Equal(t, "the push", pls[0].Message.Text, "are you there?")
		assert.True(t, fail.failed.Load(), "the first claim failed")
		m := opsScrape(t, e.client, e.ts.URL+"/metrics")
		assert.Equal(t, "dropped", m[`chatrelay_push_total{result="dropped"}`], 0.0)
	})
}
