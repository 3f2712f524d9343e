package transport_test

import (
	"context"
	"net/http"
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

// TestPushNoClaimForNobody: a change that none of the thread's
// subscriptions gets makes no claim (no write to the store): here an
// approval in a thread whose only subscriptions are the owner's, for
// replies only, and a participant's (a participant never gets an
// approval). The reply after it is claimed and pushed (one worker: the
// changes are taken in order, so the reply shows the approval was taken).
func TestPushNoClaimForNobody(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, func(c *transport.PushConfig) { c.Workers = 1 })})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		status, _ := e.subscribe(owner, nil, svc.Subscribe(t, "replies"), "reply")
		assert.Equal(t, "replies only", status, http.StatusCreated)
		guest := e.invite(owner, `{"name":"Guest","role":"commenter"}`)
		status, _ = e.subscribe("", bearer(guest.Token), svc.Subscribe(t, "guest"))
		assert.Equal(t, "the participant subscribes", status, http.StatusCreated)

		_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
			Ask: &chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Hour}})
		assert.Success(t, err)
		_, err = e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "done"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/replies", 1)
		awaitPushes(t, svc, "/push/guest", 1)
		m := opsScrape(t, e.client, e.ts.URL+"/metrics")
		assert.Equal(t, "claims won, lost", []float64{m[`chatrelay_push_claims_total{won="true"}`], m[`chatrelay_push_claims_total{won="false"}`]}, []float64{1, 0})
		assert.Equal(t, "pushes", len(svc.Pushes()), 2)
	})
}

// claimsAfter is a node's store whose push claims wait for gate to
// close (the other node's claim made first), and are counted.
type claimsAfter struct {
	store.Store
	store.Push
	gate  <-chan struct{}
	calls atomic.Int64
}

func (c *claimsAfter) ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	select {
	case <-c.gate:
	case <-ctx.Done():
		return false, false, ctx.Err()
	}
	c.calls.Add(1)
	return c.Push.ClaimPush(ctx, id, owner, lease, doc)
}

// claimsFirst is a node's store that closes won once it won a push claim.
type claimsFirst struct {
	store.Store
	store.Push
	once sync.Once
	won  chan struct{}
}

func (c *claimsFirst) ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	won, settled, err = c.Push.ClaimPush(ctx, id, owner, lease, doc)
	if won {
		c.once.Do(func() { close(c.won) })
	}
	return won, settled, err
}

// TestPushTakenOverWhenItsNodeStops: two nodes on one Redis; node A
// claims a reply's push, the push service answers its attempt 503, and A
// stops before its retry (a rolling restart, or a crash: either way it
// renews its claim no more). While A runs, B leaves the push to it (A
// renews its claim, however often B looks); once A's claim lapses, B
// sends the push: nothing is lost with the node that claimed it.
func TestPushTakenOverWhenItsNodeStops(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	failFirst(svc)
	// A renews every third of its lease: a lease of 2 s leaves a loaded
	// machine more than a second to run A's renewal before B may take over.
	const lease = 2 * time.Second
	be := storetest.Open(t, storetest.Redis, storetest.Options{})
	first := &claimsFirst{won: make(chan struct{})}
	a := startPush(t, pushOptions{on: be, config: func(c *transport.Config) {
		withPush(svc, retryLater(lease))(c)
		first.Store, first.Push = c.Store, store.PushOf(c.Store)
		c.Store = first
	}})
	after := &claimsAfter{gate: first.won}
	b := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
		withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })(c)
		after.Store, after.Push = c.Store, store.PushOf(c.Store)
		c.Store = after
	}})
	owner, thread := tokenN(1), threadN(1)
	a.mustPost(owner, "hello")
	status, _ := a.subscribe(owner, nil, svc.Subscribe(t, "owner"))
	assert.Equal(t, "subscribe", status, http.StatusCreated)
	_, err := b.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
	assert.Success(t, err)
	awaitPushes(t, svc, "/push/owner", 1) // A's attempt, answered 503

	// While A runs, its claim holds: B looked again twice (a lease apart),
	// and sent nothing.
	assert.Eventually(t, 20*time.Second, "B looked at A's claim again", func() bool { return after.calls.Load() >= 3 })
	assert.Equal(t, "pushes while A runs", len(svc.Pushes()), 1)

	a.stop()
	_, pls := awaitPushes(t, svc, "/push/owner", 2)
	assert.Equal(t, "the push B sent", pls[1].Message.Text, "are you there?")
	assert.Eventually(t, 10*time.Second, "B counted the takeover and the push", func() bool {
		m := opsScrape(t, b.client, b.ts.URL+"/metrics")
		return m["chatrelay_push_takeovers_total{}"] == 1 && m[`chatrelay_push_total{result="sent"}`] == 1
	})
}

// TestPushHandedOverAtShutdown: a server stops while a push waits for
// its retry (its push service answered 503); the next server to start on
// the store sends it: a restart loses no push, on one node as on several.
func TestPushHandedOverAtShutdown(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		failFirst(svc)
		const lease = time.Second
		be, before, _, thread := retryingServer(t, backend, svc, lease, "owner")
		_, err := before.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/owner", 1) // answered 503
		before.stop()

		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
		_, pls := awaitPushes(t, svc, "/push/owner", 2)
		assert.Equal(t, "the push sent after the restart", pls[1].Message.Text, "are you there?")
		assert.Eventually(t, 10*time.Second, "the push counted sent", func() bool {
			m := opsScrape(t, after.client, after.ts.URL+"/metrics")
			return m[`chatrelay_push_total{result="sent"}`] == 1
		})
		assert.Equal(t, "pushes", len(svc.Pushes()), 2)
	})
}

// failFirst makes svc answer the first push to each subscription 503 (to
// be tried again) and every later one 201.
func failFirst(svc *pushtest.Service) {
	svc.Respond = func(_ string, n int) pushtest.Answer {
		if n == 1 {
			return pushtest.Answer{Status: http.StatusServiceUnavailable}
		}
		return pushtest.Answer{Status: http.StatusCreated}
	}
}

// retryLater is a push config with claims of lease whose retries never
// come while its server runs: 5 minutes, within the 10 of the window, so
// a push answered 503 waits for its retry, unsettled, until the server
// stops.
func retryLater(lease time.Duration) func(*transport.PushConfig) {
	return func(p *transport.PushConfig) {
		p.Lease = lease
		p.Backoff = []time.Duration{5 * time.Minute}
	}
}

// subsFailing is a node's store whose PushSubscriptions answers
// store_unavailable while failing is above zero, once a call.
type subsFailing struct {
	store.Store
	store.Push
	failing atomic.Int64
}

func (s *subsFailing) PushSubscriptions(ctx context.Context, thread string) ([]chatrelay.PushSubscription, error) {
	if s.failing.Add(-1) >= 0 {
		return nil, chatrelay.Errorf(chatrelay.StoreUnavailable, "the store cannot be reached")
	}
	return s.Push.PushSubscriptions(ctx, thread)
}

// TestPushAfterTheStoreCouldNotSay: a change whose subscriptions the
// store cannot read for a moment (Redis out of reach, a lock held) is
// looked at again, and pushed once it can: it was dropped as if the
// thread had no subscription, on a new change as on one taken over or
// from the journal at a start.
func TestPushAfterTheStoreCouldNotSay(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		flaky := &subsFailing{}
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			withPush(svc, func(*transport.PushConfig) {})(c)
			flaky.Store, flaky.Push = c.Store, store.PushOf(c.Store)
			c.Store = flaky
		}})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		status, _ := e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		assert.Equal(t, "subscribe", status, http.StatusCreated)
		flaky.failing.Store(2)
		_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/owner", 1)
		assert.True(t, flaky.failing.Load() < 0, "the subscriptions were read again after two failures")
	})
}

// retryingServer opens a store of backend and starts a server on it whose
// pushes go to svc with claims of lease and retries that never come while
// it runs (retryLater); the owner's thread has a message and a
// subscription of svc's under each name.
func retryingServer(t *testing.T, backend string, svc *pushtest.Service, lease time.Duration, names ...string) (be *storetest.Backend, e *pushEnv, owner, thread string) {
	t.Helper()
	be = storetest.Open(t, backend, storetest.Options{})
	e = startPush(t, pushOptions{on: be, config: withPush(svc, retryLater(lease))})
	owner, thread = tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	for _, name := range names {
		status, _ := e.subscribe(owner, nil, svc.Subscribe(t, name))
		assert.Equal(t, "subscribe "+name, status, http.StatusCreated)
	}
	return be, e, owner, thread
}
