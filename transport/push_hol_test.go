package transport_test

import (
	"strconv"
	"sync"
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
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before hung.Close, which waits for its handlers
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
