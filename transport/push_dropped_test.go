package transport_test

import (
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushClosingForADroppedInteraction: a pending approval with a push
// subscription that retention drops (an append past the message limit;
// the sweep past the age, the thread kept; the sweep, with its thread)
// gets its closing push, expired, once: the device's notification with
// Approve and Deny is replaced, as for an approval that expired.
func TestPushClosingForADroppedInteraction(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"append", "append by another process", "sweep", "removal"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T, backend string) {
				svc := pushtest.NewService(t)
				clock := newSkewed(0)
				opt := clock.storeOpts()
				opt.Retention = chatrelay.Retention{Messages: 3, Age: time.Hour}
				e := startPush(t, pushOptions{backend: backend, store: opt, config: func(c *transport.Config) {
					withPush(svc, nil)(c)
					c.Now = clock.Now
				}})
				owner, thread := tokenN(1), threadN(1)
				e.mustPost(owner, "hello")
				e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
				ix := e.ask(thread, chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: 72 * time.Hour})
				awaitPushes(t, svc, "/push/owner", 1)
				writer := e.store
				if how == "append by another process" { // the host CLI's
					writer = e.backend.Another(t, opt).Store
				}
				reply := func(text string) {
					_, err := writer.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
					assert.Success(t, err)
				}
				pushes := 1
				switch how {
				case "append", "append by another process": // the third message after it drops it
					for _, text := range []string{"one", "two", "three"} {
						reply(text)
						pushes++
					}
				case "sweep": // past the age; a newer message keeps the thread
					clock.step(50 * time.Minute)
					reply("newer")
					pushes++
					clock.step(20 * time.Minute)
					st, err := e.store.Sweep(t.Context())
					assert.Success(t, err)
					assert.Equal(t, "messages the sweep dropped", st.Dropped, 2)
				case "removal": // past the age, and every message: the thread goes
					clock.step(2 * time.Hour)
					st, err := e.store.Sweep(t.Context())
					assert.Success(t, err)
					assert.Equal(t, "threads the sweep removed", st.ThreadsRemoved, 1)
				}
				_, pls := awaitPushes(t, svc, "/push/owner", pushes+1)
				closed := 0
				for _, p := range pls {
					if p.Type == chatrelay.PushTypeInteractionClosed {
						closed++
						assert.Equal(t, "the closing push's message", p.Message.ID, ix.ID)
						assert.Equal(t, "its state", p.Message.Interaction.State, chatrelay.Expired)
					}
				}
				assert.Equal(t, "closing pushes", closed, 1)
				if how != "removal" {
					// Once: a later reply is pushed, and the closing push
					// is not sent again.
					reply("later")
					_, pls = awaitPushes(t, svc, "/push/owner", pushes+2)
					assert.Equal(t, "the last push", pls[len(pls)-1].Message.Text, "later")
					closed = 0
					for _, p := range pls {
						if p.Type == chatrelay.PushTypeInteractionClosed {
							closed++
						}
					}
					assert.Equal(t, "closing pushes", closed, 1)
				}
			})
		})
	}
}

// TestPushClosingForADroppedInteractionOnce: two nodes on one Redis both
// hear of an approval retention dropped pending; its closing push is
// sent once.
func TestPushClosingForADroppedInteractionOnce(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	opt := storetest.Options{Retention: chatrelay.Retention{Messages: 3}}
	be := storetest.Open(t, storetest.Redis, opt)
	var nodes []*pushEnv
	for i := range 2 {
		on := be
		if i > 0 {
			on = be.Another(t, opt)
		}
		nodes = append(nodes, startPush(t, pushOptions{on: on, store: opt, config: withPush(svc, nil)}))
	}
	owner, thread := tokenN(1), threadN(1)
	nodes[0].mustPost(owner, "hello")
	nodes[0].subscribe(owner, nil, svc.Subscribe(t, "owner"))
	ix := nodes[1].ask(thread, chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Hour})
	awaitPushes(t, svc, "/push/owner", 1)
	for _, text := range []string{"one", "two", "three"} {
		_, err := be.Store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
		assert.Success(t, err)
	}
	awaitPushes(t, svc, "/push/owner", 5)
	_, err := be.Store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "later"})
	assert.Success(t, err)
	_, pls := awaitPushes(t, svc, "/push/owner", 6)
	closed := 0
	for _, p := range pls {
		if p.Type == chatrelay.PushTypeInteractionClosed {
			closed++
			assert.Equal(t, "the closing push's message", p.Message.ID, ix.ID)
		}
	}
	assert.Equal(t, "closing pushes", closed, 1)
	assert.Equal(t, "pushes", len(pushesTo(svc, "/push/owner")), 6)
}
