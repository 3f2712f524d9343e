package transport_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// claimsHeld is a node's store whose push claims are all held by another
// node (on Redis: the node that stopped a moment ago, its lease not yet
// lapsed), and counted.
type claimsHeld struct {
	store.Store
	store.Push
	calls atomic.Int64
}

func (c *claimsHeld) ClaimPush(context.Context, string, string, time.Duration, []byte) (won, settled bool, err error) {
	c.calls.Add(1)
	return false, false, nil
}

// TestPushHandoverKeptAcrossTwoRestarts: a server stops while a push
// waits for its retry, and hands it over; the next server takes it, but
// the stopped server's claim has not lapsed yet (a restart is quicker
// than a lease), so it waits for it; that server is stopped too before
// the claim lapses (a deploy rolled back at once). It hands the change
// over again, and the third server sends it: two restarts in a row lose
// no push either.
func TestPushHandoverKeptAcrossTwoRestarts(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		failFirst(svc)
		const lease = time.Second
		be, first, _, thread := retryingServer(t, backend, svc, lease, "owner")
		_, err := first.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/owner", 1) // answered 503
		first.stop()

		held := &claimsHeld{}
		second := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
			withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })(c)
			held.Store, held.Push = c.Store, store.PushOf(c.Store)
			c.Store = held
		}})
		assert.Eventually(t, 10*time.Second, "the second server took the change and found it claimed", func() bool { return held.calls.Load() >= 1 })
		second.stop()

		third := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
		_, pls := awaitPushes(t, svc, "/push/owner", 2)
		assert.Equal(t, "the push sent after two restarts", pls[1].Message.Text, "are you there?")
		assert.Eventually(t, 10*time.Second, "the push counted sent", func() bool {
			return opsScrape(t, third.client, third.ts.URL+"/metrics")[`chatrelay_push_total{result="sent"}`] == 1
		})
	})
}

// TestPushHandoverOfAClosedInteractionNotSent: an approval's push waits
// for its retry (503) when the approval is answered and its closing push
// sent; the server then stops and hands the opening change over. The next
// server, which never saw the close, does not send the opening push
// (counted superseded): it would replace "Approved" at the push service
// with Approve and Deny for an answered approval.
func TestPushHandoverOfAClosedInteractionNotSent(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		failFirst(svc)
		const lease = time.Second
		be, before, owner, thread := retryingServer(t, backend, svc, lease, "phone")
		m, err := before.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
			Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/phone", 1) // answered 503
		status, _, b := before.do(http.MethodPost, chatrelay.PathRespond, owner, fmt.Sprintf(`{"interaction_id":%q,"decision":"approve"}`, m.Interaction.ID), nil)
		assert.Equal(t, "approve "+string(b), status, 200)
		_, pls := awaitPushes(t, svc, "/push/phone", 2)
		assert.Equal(t, "the second push", pls[1].Type, chatrelay.PushTypeInteractionClosed)
		assert.Eventually(t, 10*time.Second, "the closing push's answer taken", func() bool {
			return opsScrape(t, before.client, before.ts.URL+"/metrics")[`chatrelay_push_total{result="sent"}`] == 1
		})
		before.stop()

		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
		assert.Eventually(t, 10*time.Second, "the handed over change dealt with", func() bool {
			return opsScrape(t, after.client, after.ts.URL+"/metrics")[`chatrelay_push_total{result="superseded"}`] == 1 ||
				len(pushesTo(svc, "/push/phone")) > 2
		})
		ps := pushesTo(svc, "/push/phone")
		assert.Equal(t, "pushes received", len(ps), 2)
	})
}

// claimsStall is a node's store whose push claims never answer until
// the server stops (a store that stalls), counted as they are made.
type claimsStall struct {
	store.Store
	store.Push
	calls atomic.Int64
}

func (c *claimsStall) ClaimPush(ctx context.Context, _, _ string, _ time.Duration, _ []byte) (won, settled bool, err error) {
	c.calls.Add(1)
	<-ctx.Done()
	return false, false, ctx.Err()
}

// TestPushHandoverKeptWhenStoppedWhileTaking: a server stops with three
// pushes waiting for their retry and hands them over; the next server
// takes them, one worker and a queue of one, and stops while its first
// claim is still unanswered: one change is being claimed, one queued, and
// one not yet queued. It hands all three over again, and the server after
// it sends them: a change is not lost because the server stopped while
// it was claiming it, or before it had queued it.
func TestPushHandoverKeptWhenStoppedWhileTaking(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		svc.Respond = func(_ string, n int) pushtest.Answer {
			if n <= 3 {
				return pushtest.Answer{Status: http.StatusServiceUnavailable}
			}
			return pushtest.Answer{Status: http.StatusCreated}
		}
		const lease = time.Second
		be, first, _, thread := retryingServer(t, backend, svc, lease, "owner")
		for i := range 3 {
			_, err := first.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: fmt.Sprintf("reply %d", i)})
			assert.Success(t, err)
		}
		awaitPushes(t, svc, "/push/owner", 3) // each answered 503
		first.stop()

		stall := &claimsStall{}
		second := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
			withPush(svc, func(p *transport.PushConfig) { p.Lease, p.Workers, p.Queue = lease, 1, 1 })(c)
			stall.Store, stall.Push = c.Store, store.PushOf(c.Store)
			c.Store = stall
		}})
		assert.Eventually(t, 10*time.Second, "the second server claims the first change", func() bool { return stall.calls.Load() >= 1 })
		second.stop()

		startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
		_, pls := awaitPushes(t, svc, "/push/owner", 6)
		var sent []string
		for _, pl := range pls[3:] {
			sent = append(sent, pl.Message.Text)
		}
		slices.Sort(sent)
		assert.Equal(t, "the pushes sent after two restarts", sent, []string{"reply 0", "reply 1", "reply 2"})
	})
}

// TestPushHandoverOnlyWhatWasNotSent: a reply goes to two subscriptions
// of a thread; one push service takes it, the other answers 503, and
// the server stops before the retry. The next server sends it to the
// one that did not get it, and not again to the one that did: a restart
// (a deploy) does not push again every reply of the last minutes to
// every phone of a thread because one of its subscriptions was slow.
func TestPushHandoverOnlyWhatWasNotSent(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		svc.Respond = func(path string, n int) pushtest.Answer {
			if path == "/push/flaky" && n == 1 {
				return pushtest.Answer{Status: http.StatusServiceUnavailable}
			}
			return pushtest.Answer{Status: http.StatusCreated}
		}
		const lease = time.Second
		be, before, _, thread := retryingServer(t, backend, svc, lease, "good", "flaky")
		_, err := before.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/good", 1)
		awaitPushes(t, svc, "/push/flaky", 1) // answered 503
		assert.Eventually(t, 10*time.Second, "both answers taken", func() bool {
			m := opsScrape(t, before.client, before.ts.URL+"/metrics")
			return m[`chatrelay_push_total{result="sent"}`] == 1 && m[`chatrelay_push_total{result="retried"}`] == 1
		})
		before.stop()

		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
		awaitPushes(t, svc, "/push/flaky", 2)
		after.stop() // its pushes made
		assert.Equal(t, "pushes to the subscription that had it", len(pushesTo(svc, "/push/good")), 1)
	})
}

// TestPushHandoverKeepsTheWindow: a push refused (503) is handed over at
// a shutdown, and the next server starts 9 minutes after its first
// attempt. It tries it once more, and, refused again, gives it up
// (failed): a push's 10 minutes of retries count from its first attempt,
// on whichever server, so restarts do not make a push be tried for ever.
func TestPushHandoverKeepsTheWindow(t *testing.T) {
	t.Parallel()
	{ // the file store: on Redis a watched claim waits for the clock to move (it does not here)
		backend := storetest.File
		svc := pushtest.NewService(t)
		svc.Respond = func(string, int) pushtest.Answer { return pushtest.Answer{Status: http.StatusServiceUnavailable} }
		clk := testclock.New(time.Now())
		const lease = time.Second
		config := func(c *transport.Config) {
			withPush(svc, retryLater(lease))(c)
			c.Now = clk.Now
		}
		be := storetest.Open(t, backend, storetest.Options{Now: clk.Now})
		before := startPush(t, pushOptions{on: be, config: config})
		owner, thread := tokenN(1), threadN(1)
		before.mustPost(owner, "hello")
		status, _ := before.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		assert.Equal(t, "subscribe", status, http.StatusCreated)
		_, err := before.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/owner", 1) // answered 503
		before.stop()

		clk.Advance(9 * time.Minute)
		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{Now: clk.Now}), config: config})
		awaitPushes(t, svc, "/push/owner", 2) // answered 503 again
		var m map[string]float64
		assert.Eventually(t, 10*time.Second, "the second attempt's outcome", func() bool {
			m = opsScrape(t, after.client, after.ts.URL+"/metrics")
			return m[`chatrelay_push_total{result="failed"}`]+m[`chatrelay_push_total{result="retried"}`] >= 1
		})
		assert.Equal(t, "failed, retried", []float64{m[`chatrelay_push_total{result="failed"}`], m[`chatrelay_push_total{result="retried"}`]}, []float64{1, 0})
	}
}
