package transport_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
)

// TestPushHungEndpointsHoldBackNoOne: a push service that takes each push
// and never answers, subscribed 19 times in one thread, while hermes posts
// eight replies there (152 pushes to it: more than the 64 a server has
// in flight), holds back neither the thread's own subscription at another
// service nor another thread's approval: each endpoint has at most one
// push in flight, the next ones wait behind it, so one endpoint's hang
// takes one place, not every place for the 25 s its answer is waited for.
func TestPushHungEndpointsHoldBackNoOne(t *testing.T) {
	t.Parallel()
	hung := pushtest.NewService(t)
	release, _ := heldUntilFreed(t)
	hung.Respond = func(string, int) pushtest.Answer {
		<-release
		return pushtest.Answer{Status: 201}
	}
	good := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPushTo(hung.Certificate(), nil)})
	// Both services are httptest's: one certificate authority for both.
	owner1, owner2 := tokenN(1), tokenN(2)
	e.mustPost(owner1, "hello")
	e.mustPost(owner2, "hello")
	for i := range chatrelay.LimitPushSubscriptions.Max - 1 {
		status, a := e.subscribe(owner1, nil, hung.Subscribe(t, "h"+strconv.Itoa(i)))
		assert.Equal(t, "a hung endpoint's subscription "+a.Code, status, 201)
	}
	status, a := e.subscribe(owner1, nil, good.Subscribe(t, "same"))
	assert.Equal(t, "the same thread's good subscription "+a.Code, status, 201)
	status, a = e.subscribe(owner2, nil, good.Subscribe(t, "other"))
	assert.Equal(t, "the other thread's subscription "+a.Code, status, 201)

	for range 8 {
		_, err := e.store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "a reply"})
		assert.Success(t, err)
	}
	_, err := e.store.Append(t.Context(), threadN(2), store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
	assert.Success(t, err)
	// awaitPushes waits 10 s: less than the 25 s a hung push holds its place.
	_, other := awaitPushes(t, good, "/push/other", 1)
	assert.Equal(t, "the other thread's push", other[0].Type, chatrelay.PushTypeInteraction)
	awaitPushes(t, good, "/push/same", 8)
}

// TestPushSlowEndpointsTakeTurns: 80 endpoints of four threads whose push
// service takes 2 s to answer each push, three replies due to each (240
// pushes: more than the 64 places), and an approval of a fifth thread
// made once they are under way. A subscription's next push waits for a
// place behind the ones already waiting, so the approval goes out once a
// few places free (4-5 s here: the service speaks HTTP/1.1, 16
// connections at once), not once the four threads' pushes are nearly
// all sent (20 s when a subscription's pushes kept their place from one
// to the next).
func TestPushSlowEndpointsTakeTurns(t *testing.T) {
	t.Parallel()
	slow := pushtest.NewService(t)
	var arrived atomic.Int64
	slow.Respond = func(string, int) pushtest.Answer {
		arrived.Add(1)
		time.Sleep(2 * time.Second) // the push service's answer time
		return pushtest.Answer{Status: 201}
	}
	good := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPushTo(slow.Certificate(), nil)})
	for th := 1; th <= 4; th++ {
		e.mustPost(tokenN(th), "hello")
		for i := range chatrelay.LimitPushSubscriptions.Max {
			status, a := e.subscribe(tokenN(th), nil, slow.Subscribe(t, "s"+strconv.Itoa(th)+"-"+strconv.Itoa(i)))
			assert.Equal(t, "a slow endpoint's subscription "+a.Code, status, 201)
		}
	}
	e.mustPost(tokenN(5), "hello")
	status, a := e.subscribe(tokenN(5), nil, good.Subscribe(t, "other"))
	assert.Equal(t, "the other thread's subscription "+a.Code, status, 201)
	for range 3 {
		for th := 1; th <= 4; th++ {
			_, err := e.store.Append(t.Context(), threadN(th), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "a reply"})
			assert.Success(t, err)
		}
	}
	assert.Eventually(t, 10*time.Second, "the slow service's first pushes", func() bool { return arrived.Load() > 0 })
	start := time.Now()
	_, err := e.store.Append(t.Context(), threadN(5), store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
	assert.Success(t, err)
	assert.Eventually(t, 12*time.Second, "the other thread's approval", func() bool { return len(pushesTo(good, "/push/other")) == 1 })
	t.Logf("the approval came %v after it was made", time.Since(start))
}

// heldUntilFreed is a channel a push service's Respond waits on, to hold
// its answers, and free, which closes it (once, however often called).
// The test's end frees it too: call it after making the service, so that
// it runs before the service's Close, which waits for its handlers.
func heldUntilFreed(t *testing.T) (held <-chan struct{}, free func()) {
	release := make(chan struct{})
	var once sync.Once
	free = func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	return release, free
}
