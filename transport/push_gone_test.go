package transport_test

import (
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
)

// TestPushGoneDropsThePushesWaiting: pushes waiting behind one to the same
// subscription (start) are not sent once that one is answered 410 and the
// subscription deleted: each would be refused the same. They are counted
// gone, unsent. They were sent, each answered 410 and counted again.
func TestPushGoneDropsThePushesWaiting(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	release, free := heldUntilFreed(t)
	svc.Respond = func(path string, n int) pushtest.Answer {
		if path != "/push/phone" {
			return pushtest.Answer{Status: 201}
		}
		if n == 1 {
			<-release
		}
		return pushtest.Answer{Status: 410}
	}
	e := startPush(t, pushOptions{config: withPush(svc, nil)})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	// The phone's subscription first: each change starts its push before
	// the laptop's, so once the laptop has a change's push, the phone's
	// waits behind the one in flight.
	for _, name := range []string{"phone", "laptop"} {
		status, a := e.subscribe(owner, nil, svc.Subscribe(t, name))
		assert.Equal(t, name+"'s subscription "+a.Code, status, 201)
	}
	for range 3 {
		_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "a reply"})
		assert.Success(t, err)
	}
	awaitPushes(t, svc, "/push/laptop", 3)
	free()
	assert.Eventually(t, 10*time.Second, "the three phone pushes counted gone", func() bool {
		return opsScrape(t, e.client, e.ts.URL+"/metrics")[`chatrelay_push_total{result="gone"}`] == 3
	})
	assert.Equal(t, "pushes the phone's push service received", len(pushesTo(svc, "/push/phone")), 1)
}
