package transport_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
	"github.com/chatrelay/chatrelay/webpush"
)

// TestPushKeyRotate: the pusher keeps the VAPID key it read, and a
// rotate made in the store by another process (chatrelay push rotate-key)
// is still picked up: by the pushes after the recheck interval (30 s on
// the server's clock), and at once by a push that a push service refuses
// with 403 because its subscription was made with the new key (sent
// again with the store's key, not counted rejected).
func TestPushKeyRotate(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	var skew atomic.Int64
	e := startPush(t, pushOptions{config: func(c *transport.Config) {
		withPush(svc, nil)(c)
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	}})
	ctx := t.Context()
	owner, thread := tokenN(1), threadN(1)
	reply := func(text string) {
		t.Helper()
		_, err := e.store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
		assert.Success(t, err)
	}
	rotate := func() string {
		t.Helper()
		raw, err := store.PushOf(e.store).RotateVAPIDKey(ctx)
		assert.Success(t, err)
		v, err := webpush.ParseVAPID(raw, "")
		assert.Success(t, err)
		return v.PublicKey()
	}
	e.mustPost(owner, "hello")
	_, k0 := e.pushCall(http.MethodGet, chatrelay.PathPushKey, "", nil)
	e.subscribe(owner, nil, svc.Subscribe(t, "a"))
	reply("one")
	ps, _ := awaitPushes(t, svc, "/push/a", 1)
	assert.Equal(t, "the first push's key", ps[0].Key, k0.PublicKey)

	k1 := rotate()
	skew.Store(int64(time.Minute))
	reply("two")
	ps, pls := awaitPushes(t, svc, "/push/a", 2)
	assert.Equal(t, "a push a minute after a rotate: its key", ps[1].Key, k1)
	assert.Equal(t, "its text", pls[1].Message.Text, "two")

	k2 := rotate()
	b := svc.Subscribe(t, "b")
	svc.Bind("/push/b", k2)
	e.subscribe(owner, nil, b)
	reply("three")
	assert.Eventually(t, 10*time.Second, "the push to the subscription made with the new key, signed by it", func() bool {
		for _, p := range pushesTo(svc, "/push/b") {
			if p.Key == k2 && p.Err == nil {
				return true
			}
		}
		return false
	})
	var m map[string]float64
	assert.Eventually(t, 10*time.Second, "every push sent", func() bool {
		m = opsScrape(t, e.client, e.ts.URL+"/metrics")
		return m[`chatrelay_push_total{result="sent"}`] == 4
	})
	assert.Equal(t, "rejected, retried", []float64{m[`chatrelay_push_total{result="rejected"}`], m[`chatrelay_push_total{result="retried"}`]}, []float64{0, 0})
}
