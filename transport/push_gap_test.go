package transport_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
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

// gappyFeed is a store whose change feed skips the batches of changes
// while its gap is open, and then says Reset, as a store's feed does when
// it lost its way, or a Feed for a reader that fell behind.
type gappyFeed struct {
	store.Store
	mu      sync.Mutex // serialises the feed's calls of fn with reset's
	gap     bool
	skipped map[string]bool   // the ids of the messages it skipped
	passed  map[string]bool   // the ids of the messages it handed on
	fn      func(store.Batch) // the running feed's
}

func (g *gappyFeed) Follow(ctx context.Context, fn func(store.Batch)) error {
	return g.Store.Follow(ctx, func(b store.Batch) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.fn = fn
		if g.gap && len(b.Messages) > 0 {
			for _, e := range b.Messages {
				g.skipped[e.ID] = true
			}
			return
		}
		if g.passed == nil {
			g.passed = map[string]bool{}
		}
		for _, e := range b.Messages {
			g.passed[e.ID] = true
		}
		fn(b)
	})
}

func (g *gappyFeed) open() {
	g.mu.Lock()
	g.gap, g.skipped = true, map[string]bool{}
	g.mu.Unlock()
}

// skippedAll reports whether the feed skipped the messages of ids.
func (g *gappyFeed) skippedAll(ids ...string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return holdsAll(g.skipped, ids)
}

// passedAll reports whether the feed handed on the messages of ids.
func (g *gappyFeed) passedAll(ids ...string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return holdsAll(g.passed, ids)
}

// holdsAll reports whether set holds every one of ids.
func holdsAll(set map[string]bool, ids []string) bool {
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}

// reset closes the gap with a Reset batch of thread ("": every thread).
func (g *gappyFeed) reset(thread string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gap = false
	g.fn(store.Batch{Thread: thread, Reset: true})
}

// startGappyPush starts a server with push on be, its pushes to svc, whose
// feed may skip changes (g).
func startGappyPush(t *testing.T, be *storetest.Backend, svc *pushtest.Service) (*pushEnv, *gappyFeed) {
	t.Helper()
	g := &gappyFeed{Store: be.Store}
	e := startPush(t, pushOptions{on: be, config: func(c *transport.Config) {
		withPush(svc, nil)(c)
		c.Feed = store.NewFeed(g)
	}})
	return e, g
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
				e, g := startGappyPush(t, be, svc)
				owner, thread := tokenN(1), threadN(1)
				e.mustPost(owner, "hello")
				e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
				reply := func(text string) string {
					en, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
					assert.Success(t, err)
					return en.ID
				}
				reply("before the gap")
				awaitPushes(t, svc, "/push/owner", 1)

				g.open()
				inGap := reply("in the gap")
				ix := e.ask(thread, chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Hour})
				assert.Eventually(t, 5*time.Second, "the feed to skip both changes", func() bool { return g.skippedAll(inGap, ix.ID) })
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

// pendingFails is a store whose Pending fails (store_unavailable) the
// next fails times.
type pendingFails struct {
	store.Store
	fails atomic.Int32
}

func (p *pendingFails) Pending(ctx context.Context) ([]store.PendingInteraction, error) {
	if p.fails.Add(-1) >= 0 {
		return nil, chatrelay.Errorf(chatrelay.StoreUnavailable, "storage is unavailable")
	}
	return p.Store.Pending(ctx)
}

// TestExpiryAfterAFeedReset: an approval asked while the feed skipped
// its change expires at its deadline once the feed says Reset (of its
// thread, or of every thread), even if the store cannot list the
// pending interactions then (the next 3 times it is asked).
func TestExpiryAfterAFeedReset(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		for _, every := range []bool{false, true} {
			t.Run(fmt.Sprintf("every thread %v", every), func(t *testing.T) {
				be := storetest.Open(t, backend, storetest.Options{})
				g := &gappyFeed{Store: be.Store}
				st := &pendingFails{Store: be.Store}
				e := startPush(t, pushOptions{on: be, config: func(c *transport.Config) {
					c.Store, c.Feed = st, store.NewFeed(g)
				}})
				owner, thread := tokenN(1), threadN(1)
				e.mustPost(owner, "hello")
				g.open()
				ix := e.ask(thread, chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Second})
				assert.Eventually(t, 5*time.Second, "the feed to skip the approval", func() bool { return g.skippedAll(ix.ID) })
				st.fails.Store(3)
				if every {
					g.reset("")
				} else {
					g.reset(thread)
				}
				assert.Eventually(t, 10*time.Second, "the approval to expire", func() bool {
					p, err := be.Store.Changes(t.Context(), thread, 0, 0)
					assert.Success(t, err)
					for _, m := range p.Messages {
						if m.ID == ix.ID {
							return m.Interaction.State == chatrelay.Expired
						}
					}
					return false
				})
			})
		}
	})
}

// changesFail is a store whose Changes fails (store_unavailable) while
// failing is set, and notes when each failed call came.
type changesFail struct {
	store.Store
	store.Push
	failing atomic.Bool
	mu      sync.Mutex
	failed  []time.Time
}

func (c *changesFail) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	if c.failing.Load() {
		c.mu.Lock()
		c.failed = append(c.failed, time.Now())
		c.mu.Unlock()
		return store.Page{}, chatrelay.Errorf(chatrelay.StoreUnavailable, "storage is unavailable")
	}
	return c.Store.Changes(ctx, thread, since, limit)
}

func (c *changesFail) failures() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.failed)
}

// TestPushCatchUpTriedAgainEverySecond: a catch-up the store cannot read
// (store_unavailable) is tried again a second later, not at once in a
// loop; once the store answers, the skipped reply is pushed once.
func TestPushCatchUpTriedAgainEverySecond(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		be := storetest.Open(t, backend, storetest.Options{})
		g := &gappyFeed{Store: be.Store}
		st := &changesFail{Store: be.Store, Push: store.PushOf(be.Store)}
		e := startPush(t, pushOptions{on: be, config: func(c *transport.Config) {
			withPush(svc, nil)(c)
			c.Store, c.Feed = st, store.NewFeed(g)
		}})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		g.open()
		en, err := be.Store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "in the gap"})
		assert.Success(t, err)
		assert.Eventually(t, 5*time.Second, "the feed to skip the reply", func() bool { return g.skippedAll(en.ID) })
		st.failing.Store(true)
		g.reset(thread)
		assert.Eventually(t, 10*time.Second, "three reads of the catch-up", func() bool { return len(st.failures()) >= 3 })
		st.failing.Store(false)
		f := st.failures()
		// A lower bound only: a loaded machine makes the tries later, never sooner.
		assert.True(t, f[2].Sub(f[0]) >= 1900*time.Millisecond, "the third read %v after the first; want about 2s", f[2].Sub(f[0]))
		_, pls := awaitPushes(t, svc, "/push/owner", 1)
		assert.Equal(t, "the push", pls[0].Message.Text, "in the gap")
	})
}

// stallNode is a server of the handover tests: its feed may skip
// changes (g), its store may stall (st), its push config is changed by
// push; its owner (tokenN(1)) wrote the thread's first message and
// subscribed at svc as "owner".
type stallNode struct {
	*pushEnv
	g      *gappyFeed
	st     *stalls
	thread string
}

func startStallNode(t *testing.T, be *storetest.Backend, svc *pushtest.Service, push func(*transport.PushConfig), config func(*transport.Config)) *stallNode {
	t.Helper()
	n := &stallNode{g: &gappyFeed{Store: be.Store}, st: &stalls{}, thread: threadN(1)}
	n.pushEnv = startPush(t, pushOptions{on: be, config: func(c *transport.Config) {
		withPush(svc, push)(c)
		n.st.Store, n.st.Push = c.Store, store.PushOf(c.Store)
		c.Store, c.Feed = n.st, store.NewFeed(n.g)
		if config != nil {
			config(c)
		}
	}})
	n.mustPost(tokenN(1), "hello")
	n.subscribe(tokenN(1), nil, svc.Subscribe(t, "owner"))
	return n
}

// reply writes hermes's reply in the node's thread, through the store
// (as the host CLI does), and returns its id.
func (n *stallNode) reply(t *testing.T, text string) string {
	t.Helper()
	en, err := n.backend.Store.Append(t.Context(), n.thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
	assert.Success(t, err)
	return en.ID
}

// heldLease is the push lease of the nodes whose one worker a test holds
// in a claim (startHeldNode), and of the node started after them.
const heldLease = time.Second

// startHeldNode is startStallNode with one worker and a queue of one:
// the worker held in a claim holds every later push.
func startHeldNode(t *testing.T, be *storetest.Backend, svc *pushtest.Service) *stallNode {
	t.Helper()
	return startStallNode(t, be, svc, func(p *transport.PushConfig) { p.Workers, p.Queue, p.Lease = 1, 1, heldLease }, nil)
}

// stopThenNext stops n, checks that it pushed nothing, and starts the
// next server on n's store, which takes over what n handed over.
func (n *stallNode) stopThenNext(t *testing.T, be *storetest.Backend, svc *pushtest.Service) *pushEnv {
	t.Helper()
	n.stop()
	assert.Equal(t, "pushes before the next start", len(pushesTo(svc, "/push/owner")), 0)
	return startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = heldLease })})
}

// pushedOnce checks that pls are one push of each of texts, and no other.
func pushedOnce(t *testing.T, pls []payload, texts ...string) {
	t.Helper()
	seen := map[string]int{}
	for _, p := range pls {
		seen[p.Message.Text]++
	}
	for _, want := range texts {
		assert.Equal(t, "pushes of "+want, seen[want], 1)
	}
	assert.Equal(t, "pushes", len(pls), len(texts))
}

// TestPushCatchUpHandedOverAtStop: a server stops while a catch-up (the
// feed said Reset after skipping four replies) has queued what the queue
// had room for and waits to queue the rest, its one worker held in its
// first claim. The next server pushes each of the four replies once.
func TestPushCatchUpHandedOverAtStop(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		be := storetest.Open(t, backend, storetest.Options{})
		first := startHeldNode(t, be, svc)
		first.g.open()
		var ids []string
		for i := range 4 {
			ids = append(ids, first.reply(t, fmt.Sprint("reply ", i)))
		}
		assert.Eventually(t, 5*time.Second, "the feed to skip the replies", func() bool { return first.g.skippedAll(ids...) })
		first.st.claimsStall.Store(true)
		first.g.reset(first.thread)
		assert.Eventually(t, 10*time.Second, "the worker held in its first claim", func() bool { return first.st.claims.Load() >= 1 })
		first.st.claimsStall.Store(false) // the worker stays held; the shutdown's claims are answered
		second := first.stopThenNext(t, be, svc)
		awaitPushes(t, svc, "/push/owner", 4)
		_, err := second.store.Append(t.Context(), first.thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "after"})
		assert.Success(t, err)
		_, pls := awaitPushes(t, svc, "/push/owner", 5)
		pushedOnce(t, pls, "reply 0", "reply 1", "reply 2", "reply 3", "after")
	})
}

// TestPushCatchUpQueuedAtStopNotSentAgain: a catch-up reads again a
// change pushed already (a thread the feed never handed on, read from
// the pusher's start at each Reset), and queues it; the claim of a change
// pushed already keeps it from being pushed twice. A server that stops
// with such a change still queued (its one worker held in a claim) does
// not hand it over: the next start, which on the file store knows none of
// the stopped server's claims, pushed it again.
func TestPushCatchUpQueuedAtStopNotSentAgain(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		const lease = time.Second
		be := storetest.Open(t, backend, storetest.Options{})
		var logged transport.SyncBuffer
		first := startStallNode(t, be, svc, func(p *transport.PushConfig) { p.Workers, p.Lease = 1, lease }, func(c *transport.Config) {
			c.Log = slog.New(slog.NewTextHandler(&logged, nil))
		})
		first.reply(t, "pushed before")
		awaitPushes(t, svc, "/push/owner", 1)
		// A thread whose every change the feed skips: each Reset reads it
		// from the pusher's start.
		unheard := threadN(2)
		first.g.open()
		first.mustPost(tokenN(2), "hello")
		first.subscribe(tokenN(2), nil, svc.Subscribe(t, "unheard"))
		replyIn := func(text string) string {
			en, err := be.Store.Append(t.Context(), unheard, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
			assert.Success(t, err)
			return en.ID
		}
		caught := replyIn("caught up")
		assert.Eventually(t, 5*time.Second, "the feed to skip the reply", func() bool { return first.g.skippedAll(caught) })
		first.g.reset(unheard)
		awaitPushes(t, svc, "/push/unheard", 1)

		first.st.claimsStall.Store(true)
		first.reply(t, "held in its claim")
		assert.Eventually(t, 10*time.Second, "the worker held in its claim", func() bool { return first.st.claims.Load() >= 1 })
		first.g.open()
		inGap := replyIn("in the gap")
		assert.Eventually(t, 5*time.Second, "the feed to skip the reply", func() bool { return first.g.skippedAll(inGap) })
		first.g.reset(unheard)
		assert.Eventually(t, 10*time.Second, "the catch-up to queue the thread's two replies again", func() bool {
			return strings.Count(logged.String(), "caught up with what the feed missed") == 2 && strings.Contains(logged.String(), "changes=2")
		})
		first.st.claimsStall.Store(false) // the worker stays held; the shutdown's claims are answered
		first.stop()

		second := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
		awaitPushes(t, svc, "/push/owner", 2)
		awaitPushes(t, svc, "/push/unheard", 2)
		_, err := second.store.Append(t.Context(), first.thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "after"})
		assert.Success(t, err)
		_, pls := awaitPushes(t, svc, "/push/owner", 3)
		pushedOnce(t, pls, "pushed before", "held in its claim", "after")
		_, err = second.store.Append(t.Context(), unheard, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "after"})
		assert.Success(t, err)
		_, pls = awaitPushes(t, svc, "/push/unheard", 3)
		pushedOnce(t, pls, "caught up", "in the gap", "after")
	})
}

// stalls is a node's store whose push claims (while claimsStall is set)
// and Changes (while changesStall is set) never answer until their
// caller gives up, and whose claims of an opening push, if openings is
// not nil, wait until it is closed; counted.
type stalls struct {
	store.Store
	store.Push
	claimsStall, changesStall atomic.Bool
	claims, changes           atomic.Int64 // the calls stalled or held
	openings                  chan struct{}
}

func (c *stalls) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	if c.changesStall.Load() {
		c.changes.Add(1)
		<-ctx.Done()
		return store.Page{}, ctx.Err()
	}
	return c.Store.Changes(ctx, thread, since, limit)
}

func (c *stalls) ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	held := c.openings
	if !strings.HasSuffix(id, ":"+chatrelay.PushTypeInteraction) {
		held = nil
	}
	if c.claimsStall.Load() || held != nil {
		c.claims.Add(1)
		select {
		case <-held:
		case <-ctx.Done():
			return false, false, ctx.Err()
		}
	}
	return c.Push.ClaimPush(ctx, id, owner, lease, doc)
}

// TestPushHandoverWrittenThoughACatchUpStalls: a server stops with two
// replies not yet claimed (its one worker held in a claim, a queue of
// one) and a catch-up whose read the store never answers. The read is
// given up and the two replies handed over all the same: the next start
// pushes them. The read and the handover's write shared one deadline,
// which the stalled read spent (on Redis the write then failed: the two
// pushes were lost). The reply the stalled read was for is read by the
// next start, from where the stopped server stood (its floor): pushed
// too, once (before, it was never pushed).
func TestPushHandoverWrittenThoughACatchUpStalls(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		be := storetest.Open(t, backend, storetest.Options{})
		first := startHeldNode(t, be, svc)
		first.st.claimsStall.Store(true)
		first.reply(t, "held in its claim")
		assert.Eventually(t, 10*time.Second, "the worker held in its claim", func() bool { return first.st.claims.Load() >= 1 })
		first.st.claimsStall.Store(false) // the worker stays held
		queued := first.reply(t, "queued")
		assert.Eventually(t, 5*time.Second, "the feed to hand on the queued reply", func() bool { return first.g.passedAll(queued) })
		first.g.open()
		inGap := first.reply(t, "in the gap")
		assert.Eventually(t, 5*time.Second, "the feed to skip the reply", func() bool { return first.g.skippedAll(inGap) })
		first.st.changesStall.Store(true)
		first.g.reset(first.thread)
		assert.Eventually(t, 10*time.Second, "the catch-up's read stalled", func() bool { return first.st.changes.Load() >= 1 })
		first.stopThenNext(t, be, svc)
		_, pls := awaitPushes(t, svc, "/push/owner", 3)
		pushedOnce(t, pls, "held in its claim", "queued", "in the gap")
	})
}

// TestPushCatchUpAfterAFastNodesChange: a node whose clock runs a minute
// ahead writes a reply (its epoch a minute from now); then the feed skips
// a reply in another thread, written on time, and says Reset of that
// thread: the reply is pushed. The catch-up read from 10 s before the
// newest change heard of, a minute from now, and so read nothing.
func TestPushCatchUpAfterAFastNodesChange(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		be := storetest.Open(t, backend, storetest.Options{})
		e, g := startGappyPush(t, be, svc)
		fast := be.Another(t, storetest.Options{Now: func() time.Time { return time.Now().Add(time.Minute) }})
		for i := range 2 {
			e.mustPost(tokenN(i), "hello")
			e.subscribe(tokenN(i), nil, svc.Subscribe(t, fmt.Sprint("owner", i)))
		}
		ahead, err := fast.Store.Append(t.Context(), threadN(0), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "from the future"})
		assert.Success(t, err)
		assert.Eventually(t, 5*time.Second, "the feed to hand on the fast node's reply", func() bool { return g.passedAll(ahead.ID) })
		awaitPushes(t, svc, "/push/owner0", 1)
		g.open()
		en, err := be.Store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "on time"})
		assert.Success(t, err)
		assert.Eventually(t, 5*time.Second, "the feed to skip the reply", func() bool { return g.skippedAll(en.ID) })
		g.reset(threadN(1))
		_, pls := awaitPushes(t, svc, "/push/owner1", 1)
		assert.Equal(t, "the push", pls[0].Message.Text, "on time")
	})
}

// TestPushOpeningOvertakenByItsClose: an approval's opening change is
// slow on its way (its claim waits), and the person answers meanwhile;
// the closing push goes first. The opening push is then not sent: sent
// after the closing one, with the same Topic, it replaced "Approved" on
// the device with Approve and Deny for an answered approval.
func TestPushOpeningOvertakenByItsClose(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		st := &stalls{openings: make(chan struct{})}
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			withPush(svc, nil)(c)
			st.Store, st.Push = c.Store, store.PushOf(c.Store)
			c.Store = st
		}})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		ix := e.ask(thread, chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Hour})
		assert.Eventually(t, 10*time.Second, "the opening push's claim held", func() bool { return st.claims.Load() >= 1 })
		status, _, b := e.do(http.MethodPost, chatrelay.PathRespond, owner, fmt.Sprintf(`{"interaction_id":%q,"decision":"approve"}`, ix.Interaction.ID), nil)
		assert.Equal(t, "approve "+string(b), status, http.StatusOK)
		_, pls := awaitPushes(t, svc, "/push/owner", 1)
		assert.Equal(t, "the first push", pls[0].Type, chatrelay.PushTypeInteractionClosed)
		close(st.openings)
		assert.Eventually(t, 10*time.Second, "the opening push dealt with", func() bool {
			return opsScrape(t, e.client, e.ts.URL+"/metrics")[`chatrelay_push_total{result="superseded"}`] == 1 ||
				len(pushesTo(svc, "/push/owner")) > 1
		})
		assert.Equal(t, "pushes", len(pushesTo(svc, "/push/owner")), 1)
	})
}

// TestPushWrittenWhileNoServerRan: a change written while no server ran
// (the host CLI's reply in a restart's gap) is pushed by the next server
// to start on the store, once, and what the server before it pushed is
// not pushed again. Before, no feed handed it on and no read looked for
// it: it was never pushed.
func TestPushWrittenWhileNoServerRan(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		be, before, _, thread := retryingServer(t, backend, svc, time.Second, "owner")
		_, err := before.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "before the restart"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/owner", 1)
		before.stop()

		cli := be.Another(t, storetest.Options{}) // the host CLI, while no server runs
		_, err = cli.Store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "while no server ran"})
		assert.Success(t, err)

		var logged transport.SyncBuffer
		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
			withPush(svc, nil)(c)
			c.Log = slog.New(slog.NewTextHandler(&logged, nil))
		}})
		_, pls := awaitPushes(t, svc, "/push/owner", 2)
		assert.Equal(t, "the push sent after the restart", pls[1].Message.Text, "while no server ran")
		var line string
		assert.Eventually(t, 10*time.Second, "the start's catch-up to say what it queued", func() bool {
			for l := range strings.Lines(logged.String()) {
				if strings.Contains(l, "caught up with what the feed missed") {
					line = l
				}
			}
			return line != ""
		})
		assert.True(t, strings.Contains(line, "changes=1"), "the catch-up queued the change written while no server ran, and nothing pushed before: %s", line)
		after.stop()
		assert.Equal(t, "pushes, the one before the restart not sent again", len(svc.Pushes()), 2)
	})
}
