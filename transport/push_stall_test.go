package transport_test

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushStalledServiceHoldsBackOnlyItsOwn: a push service that accepts
// connections and then says nothing (no TLS handshake, no answer) holds
// back only its own pushes. A push's CPU work, its request's write
// included, is done one push at a time; a push whose write stalls lets
// the others go on after a few milliseconds, so every approval reaches
// the service that answers while the stalled one's pushes still wait.
func TestPushStalledServiceHoldsBackOnlyItsOwn(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.Success(t, err)
	var mu sync.Mutex
	var held []net.Conn // accepted and never answered, until the test ends
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()

	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{backend: storetest.File, config: withPush(svc, func(c *transport.PushConfig) { c.Workers = 1 })})
	const threads = 5
	for i := range threads {
		owner := tokenN(i)
		e.mustPost(owner, "hello")
		stalled := svc.Subscribe(t, "unused")
		stalled.Endpoint = "https://" + ln.Addr().String() + "/push/stalled"
		status, a := e.subscribe(owner, nil, stalled)
		assert.Equal(t, "the stalled service's subscription "+a.Code, status, 201)
		status, a = e.subscribe(owner, nil, svc.Subscribe(t, "t"+string(rune('0'+i))))
		assert.Equal(t, "the answering service's subscription "+a.Code, status, 201)
	}
	for i := range threads {
		_, err := e.store.Append(t.Context(), threadN(i), store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
			Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
		assert.Success(t, err)
	}
	for i := range threads {
		awaitPushes(t, svc, "/push/t"+string(rune('0'+i)), 1)
	}
	mu.Lock()
	n := len(held)
	mu.Unlock()
	assert.True(t, n >= 1, "the stalled service was dialled %d times", n)
	for _, p := range svc.Pushes() {
		assert.True(t, !strings.Contains(p.Path, "stalled"), "a push to %s", p.Path)
	}
}
