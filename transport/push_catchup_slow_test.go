package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// TestPushCatchUpAfterASlowNodesChange: a node whose clock runs a minute
// behind writes a thread (its epochs a minute ago); a reply on time in
// another thread is pushed. Then the feed skips the slow node's approval
// in that thread and says Reset (of the thread, or of every thread): the
// approval is pushed, once. A catch-up that read from 10 s before the
// newest change heard of (on time), or from the pusher's start, read
// past it: its approval never pushed.
func TestPushCatchUpAfterASlowNodesChange(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		for _, every := range []bool{false, true} {
			t.Run(fmt.Sprintf("every thread %v", every), func(t *testing.T) {
				svc := pushtest.NewService(t)
				be := storetest.Open(t, backend, storetest.Options{})
				e, g := startGappyPush(t, be, svc)
				slow := be.Another(t, storetest.Options{Now: func() time.Time { return time.Now().Add(-time.Minute) }})
				onTime, behind := threadN(0), threadN(1)
				e.mustPost(tokenN(0), "hello")
				e.subscribe(tokenN(0), nil, svc.Subscribe(t, "owner0"))
				hello, err := slow.Store.Append(t.Context(), behind, store.NewMessage{Author: chatrelay.Operator, Text: "hello from behind"})
				assert.Success(t, err)
				e.subscribe(tokenN(1), nil, svc.Subscribe(t, "owner1"))
				assert.Eventually(t, 5*time.Second, "the feed to hand on the slow node's message", func() bool { return g.passedAll(hello.ID) })
				_, err = e.store.Append(t.Context(), onTime, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "on time"})
				assert.Success(t, err)
				awaitPushes(t, svc, "/push/owner0", 1)

				g.open()
				a := chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Hour}
				ix, err := slow.Store.Append(t.Context(), behind, store.NewMessage{Author: chatrelay.Hermes, Ask: &a, MustExist: true})
				assert.Success(t, err)
				assert.Eventually(t, 5*time.Second, "the feed to skip the approval", func() bool { return g.skippedAll(ix.ID) })
				if every {
					g.reset("")
				} else {
					g.reset(behind)
				}
				_, pls := awaitPushes(t, svc, "/push/owner1", 1)
				assert.Equal(t, "the push", pls[0].Type, chatrelay.PushTypeInteraction)
				assert.Equal(t, "the approval pushed", pls[0].Message.ID, ix.ID)

				// Once: a later change of the thread (on the feed) pushes its
				// own reply, and the approval is not pushed again.
				after, err := slow.Store.Append(t.Context(), behind, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "after the reset"})
				assert.Success(t, err)
				_, pls = awaitPushes(t, svc, "/push/owner1", 2)
				assert.Equal(t, "the second push", pls[1].Message.ID, after.ID)
				assert.Equal(t, "the first push, not again", pls[0].Message.ID, ix.ID)
			})
		}
	})
}
