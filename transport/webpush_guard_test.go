package transport_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
	"github.com/chatrelay/chatrelay/webpush"
)

// TestPushSSRF: subscriptions to loopback and private literals, http, and
// a name that resolves to a private address are refused; a name that
// answers a public address at the subscribe and a private one at the
// push (rebinding) is never dialled at the private one (blocked). The
// resolver and the dialer are fakes that record.
func TestPushSSRF(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t) // its keys only: nothing reaches it
	f := pushtest.NewFakeNet(map[string][][]string{
		"inside.example.com": {{"10.1.2.3"}},
		"rebind.example.com": {{"203.0.114.10"}, {"10.0.0.1", "127.0.0.1"}},
		"public.example.com": {{"203.0.114.11"}},
	})
	e := startPush(t, pushOptions{config: withPush(svc, func(c *transport.PushConfig) {
		c.Guard = &webpush.Guard{Resolver: f, Dial: f.Dial}
		c.Workers = 1
	})})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	sub := svc.Subscribe(t, "x")
	for _, ep := range []string{"https://127.0.0.1/x", "https://[::1]/x", "http://public.example.com/x", "https://10.0.0.1/x",
		"https://192.168.1.1/x", "https://[fd00::1]/x", "https://100.64.0.1/x", "https://inside.example.com/x"} {
		s := sub
		s.Endpoint = ep
		status, out := e.subscribe(owner, nil, s)
		assert.True(t, status == 400 && out.Code == "invalid_push_endpoint", "%s: %d %+v", ep, status, out)
	}
	s := sub
	s.Endpoint = "https://rebind.example.com/x"
	status, _ := e.subscribe(owner, nil, s)
	assert.Equal(t, "the rebinding name at the subscribe", status, 201)
	_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "hi"})
	assert.Success(t, err)
	assert.Eventually(t, 10*time.Second, "the push blocked", func() bool {
		return opsScrape(t, e.client, e.ts.URL+"/metrics")[`chatrelay_push_total{result="blocked"}`] == 1
	})
	assert.Equal(t, "dialled", f.Dialled(), []string(nil))
	assert.Equal(t, "received", len(svc.Pushes()), 0)

	// A public answer is dialled, at the address checked (the fake
	// connects nowhere: retried, never sent).
	s.Endpoint = "https://public.example.com/x"
	status, _ = e.subscribe(owner, nil, s)
	assert.Equal(t, "public", status, 201)
	_, err = e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "again"})
	assert.Success(t, err)
	assert.Eventually(t, 10*time.Second, "the public address dialled", func() bool { return len(f.Dialled()) > 0 })
	assert.Equal(t, "the address dialled", f.Dialled()[0], "203.0.114.11:443")
}

// TestPushNeverDelaysAndStops: with a push service that never answers
// (subscribed 20 times in each of four threads: 80 endpoints, each with
// at most one push in flight) and a queue of one, posts and hermes's
// replies are all stored and answered (once the pushes in flight, 64,
// all hang, the worker waits, and the changes past the queue are left
// in the store, to be read again once it has room: none is counted
// dropped); the server then
// shuts down and its workers return, the pushes in flight cancelled.
func TestPushNeverDelaysAndStops(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	hung := make(chan struct{}, 1)
	svc.Respond = func(string, int) pushtest.Answer {
		select {
		case hung <- struct{}{}:
		default:
		}
		<-release
		return pushtest.Answer{Status: 201}
	}
	e := startPush(t, pushOptions{config: withPush(svc, func(c *transport.PushConfig) { c.Workers, c.Queue = 1, 1 })})
	owner, thread := tokenN(1), threadN(1)
	for i := 1; i <= 4; i++ {
		e.mustPost(tokenN(i), "hello")
		for k := range chatrelay.LimitPushSubscriptions.Max {
			status, a := e.subscribe(tokenN(i), nil, svc.Subscribe(t, fmt.Sprintf("owner%d-%d", i, k)))
			assert.Equal(t, "subscribe "+a.Code, status, 201)
		}
	}
	for i := 1; i <= 4; i++ {
		_, err := e.store.Append(t.Context(), threadN(i), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "first"})
		assert.Success(t, err)
	}
	<-hung // the first push hangs, and every later one (64 in flight) after it
	for i := range 80 {
		_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "more"})
		assert.Success(t, err)
		status, _, b := e.do(http.MethodPost, chatrelay.PathPost, owner, `{"text":"still here"}`, nil)
		assert.True(t, status == 201, "post %d while pushes wait: %d %s", i, status, b)
	}
	assert.Eventually(t, 10*time.Second, "the feed to bring every reply", func() bool {
		return opsScrape(t, e.client, e.ts.URL+"/metrics")[`chatrelay_feed_messages_total{author="hermes"}`] >= 84
	})
	assert.Equal(t, "changes dropped past the queue", opsScrape(t, e.client, e.ts.URL+"/metrics")[`chatrelay_push_total{result="dropped"}`], 0.0)
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop while a push hung")
	}
}
