package transport_test

import (
	"context"
	"fmt"
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

// gappyFeed is a store whose change feed skips the batches of changes
// while its gap is open, and then says Reset, as a store's feed does when
// it lost its way, or a Feed for a reader that fell behind.
type gappyFeed struct {
	store.Store
	mu      sync.Mutex // serialises the feed's calls of fn with reset's
	gap     bool
	skipped int
	fn      func(store.Batch) // the running feed's
}

func (g *gappyFeed) Follow(ctx context.Context, fn func(store.Batch)) error {
	return g.Store.Follow(ctx, func(b store.Batch) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.fn = fn
		if g.gap && len(b.Messages) > 0 {
			g.skipped++
			return
		}
		fn(b)
	})
}

func (g *gappyFeed) open() {
	g.mu.Lock()
	g.gap = true
	g.mu.Unlock()
}

func (g *gappyFeed) skips() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.skipped
}

// reset closes the gap with a Reset batch of thread ("": every thread).
func (g *gappyFeed) reset(thread string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gap = false
	g.fn(store.Batch{Thread: thread, Reset: true})
}

// TestPushAfterAFeedReset: the changes a feed skipped before it said
// Reset (of the thread, or of every thread) are pushed once each, from
// the store; what was pushed before the gap is not pushed again.
func TestPushAfterAFeedReset(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		for _, every := range []bool{false, true} {
			t.Run(fmt.Sprintf("every thread %v", every), func(t *testing.T) {
				svc := pushtest.NewService(t)
				be := storetest.Open(t, backend, storetest.Options{})
				g := &gappyFeed{Store: be.Store}
				e := startPush(t, pushOptions{on: be, config: func(c *transport.Config) {
					withPush(svc, nil)(c)
					c.Feed = store.NewFeed(g)
				}})
				owner, thread := tokenN(1), threadN(1)
				e.mustPost(owner, "hello")
				e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
				reply := func(text string) {
					_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
					assert.Success(t, err)
				}
				reply("before the gap")
				awaitPushes(t, svc, "/push/owner", 1)

				g.open()
				reply("in the gap")
				ix := e.ask(thread, chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Hour})
				assert.Eventually(t, 5*time.Second, "the feed to skip both changes", func() bool { return g.skips() == 2 })
				if every {
					g.reset("")
				} else {
					g.reset(thread)
				}
				awaitPushes(t, svc, "/push/owner", 3)
				reply("after the reset")
				_, pls := awaitPushes(t, svc, "/push/owner", 4)
				seen := map[string]int{}
				for _, p := range pls {
					key := p.Type
					switch p.Type {
					case chatrelay.PushTypeReply:
						key += " " + p.Message.Text
					case chatrelay.PushTypeInteraction:
						assert.Equal(t, "the approval pushed", p.Message.ID, ix.Message.ID)
					}
					seen[key]++
				}
				for _, want := range []string{"reply before the gap", "reply in the gap", chatrelay.PushTypeInteraction, "reply after the reset"} {
					assert.Equal(t, "pushes of "+want, seen[want], 1)
				}
				assert.Equal(t, "pushes", len(pushesTo(svc, "/push/owner")), 4)
			})
		}
	})
}

// TestPushQueueFull: changes that find the push queue full are pushed
// once it has room, each once.
func TestPushQueueFull(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, func(c *transport.PushConfig) {
			c.Workers, c.Queue = 1, 1
		})})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		const n = 30
		for i := range n {
			_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: fmt.Sprint("reply ", i)})
			assert.Success(t, err)
		}
		_, pls := awaitPushes(t, svc, "/push/owner", n)
		seen := map[string]int{}
		for _, p := range pls {
			seen[p.Message.Text]++
		}
		for i := range n {
			assert.Equal(t, fmt.Sprint("pushes of reply ", i), seen[fmt.Sprint("reply ", i)], 1)
		}
	})
}
