package storetest

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webpush"
)

// The Web Push part of the conformance suite (contract Part 5).

func pushOf(t *testing.T, b *Backend) store.Push {
	t.Helper()
	p := store.PushOf(b.Store)
	if p == nil {
		t.Fatalf("the %s store keeps no push subscriptions", b.Name)
	}
	return p
}

// pushSub is a subscription of endpoint n, by subscriber.
func pushSub(n int, subscriber string) chatrelay.PushSubscription {
	p256 := make([]byte, 65)
	p256[0] = 4
	p256[1] = byte(n)
	return chatrelay.PushSubscription{
		ID: chatrelay.NewPushID(), Endpoint: fmt.Sprintf("https://push.example.com/ep/%d", n),
		P256dh: base64.RawURLEncoding.EncodeToString(p256), Auth: base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
		Events: chatrelay.PushEvents, CreatedAt: int64(1000 + n), Subscriber: subscriber,
	}
}

func TestConformancePush(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		for _, tc := range []struct {
			name string
			run  func(t *testing.T, b *Backend)
		}{
			{"subscribe: a thread with no message is refused and keeps nothing", func(t *testing.T, b *Backend) {
				p := pushOf(t, b)
				_, _, err := p.PushSubscribe(t.Context(), thA, pushSub(1, chatrelay.SubscriberOwner))
				assert.Code(t, err, chatrelay.NotFound)
				subs, err := p.PushSubscriptions(t.Context(), thA)
				assert.Success(t, err)
				assert.Equal(t, "subscriptions", len(subs), 0)
				assert.Equal(t, "threads", b.Threads(t), []string(nil))
			}},
			{"list oldest first: by created_at, then by id, whatever order they came in", func(t *testing.T, b *Backend) {
				// FuzzStoreDiff found the file store listing in the order
				// subscribed and Redis by created_at and id: two made in
				// one millisecond (their ids random), or across a step of
				// the clock back, were listed in two orders.
				ctx := t.Context()
				p := pushOf(t, b)
				appendText(t, b.Store, thA, "", "hello")
				for _, s := range []struct {
					n  int
					id string
					at int64
				}{{1, "w_0000000c", 2000}, {2, "w_0000000b", 1000}, {3, "w_0000000a", 2000}} {
					sub := pushSub(s.n, chatrelay.SubscriberOwner)
					sub.ID, sub.CreatedAt = s.id, s.at
					_, _, err := p.PushSubscribe(ctx, thA, sub)
					assert.Success(t, err)
				}
				for _, st := range []store.Push{p, pushOf(t, b.Another(t, Options{}))} {
					subs, err := st.PushSubscriptions(ctx, thA)
					assert.Success(t, err)
					var ids []string
					for _, s := range subs {
						ids = append(ids, s.ID)
					}
					assert.Equal(t, "ids", ids, []string{"w_0000000b", "w_0000000a", "w_0000000c"})
				}
			}},
			{"subscribe, the same endpoint again, list oldest first, seen by another store, unsubscribe", func(t *testing.T, b *Backend) {
				ctx := t.Context()
				p := pushOf(t, b)
				appendText(t, b.Store, thA, "", "hello")
				first, created, err := p.PushSubscribe(ctx, thA, pushSub(1, chatrelay.SubscriberOwner))
				assert.Success(t, err)
				assert.True(t, created, "the first subscribe did not create")
				second, _, err := p.PushSubscribe(ctx, thA, pushSub(2, "p:p_00000001"))
				assert.Success(t, err)
				again := pushSub(1, chatrelay.SubscriberOwner)
				again.Events = []chatrelay.PushEvent{chatrelay.PushReply}
				got, created, err := p.PushSubscribe(ctx, thA, again)
				assert.Success(t, err)
				assert.True(t, !created && got.ID == first.ID && got.CreatedAt == first.CreatedAt, "again: %+v created %v", got, created)
				other := pushOf(t, b.Another(t, Options{}))
				subs, err := other.PushSubscriptions(ctx, thA)
				assert.Success(t, err)
				assert.Equal(t, "ids", []string{subs[0].ID, subs[1].ID}, []string{first.ID, second.ID})
				assert.Equal(t, "events replaced", subs[0].Events, []chatrelay.PushEvent{chatrelay.PushReply})
				none, err := other.PushSubscriptions(ctx, thB)
				assert.True(t, err == nil && len(none) == 0, "thread B: %v %v", none, err)
				gone, err := other.PushUnsubscribe(ctx, thA, first.ID)
				assert.Success(t, err)
				assert.Equal(t, "removed", gone.ID, first.ID)
				_, err = p.PushUnsubscribe(ctx, thA, first.ID)
				assert.Code(t, err, chatrelay.NotFound)
				subs, _ = p.PushSubscriptions(ctx, thA)
				assert.Equal(t, "left", len(subs), 1)
			}},
			{"at most 20 subscriptions a thread, even when written at once", func(t *testing.T, b *Backend) {
				ctx := t.Context()
				p := pushOf(t, b)
				appendText(t, b.Store, thA, "", "hello")
				other := pushOf(t, b.Another(t, Options{}))
				var wg sync.WaitGroup
				errs := make([]error, 30)
				for i := range 30 {
					st := p
					if i%2 == 1 {
						st = other
					}
					wg.Go(func() { _, _, errs[i] = st.PushSubscribe(ctx, thA, pushSub(i, chatrelay.SubscriberOwner)) })
				}
				wg.Wait()
				refused := 0
				for _, err := range errs {
					if err != nil {
						assert.Code(t, err, chatrelay.PushLimit)
						refused++
					}
				}
				assert.Equal(t, "refused", refused, 30-chatrelay.LimitPushSubscriptions.Max)
				subs, _ := p.PushSubscriptions(ctx, thA)
				assert.Equal(t, "kept", len(subs), chatrelay.LimitPushSubscriptions.Max)
				ids := map[string]bool{}
				for _, s := range subs {
					ids[s.ID] = true
				}
				assert.Equal(t, "distinct ids", len(ids), len(subs))
				// A known endpoint is still taken at the limit.
				_, created, err := p.PushSubscribe(ctx, thA, subs[3])
				assert.True(t, err == nil && !created, "a known endpoint at the limit: %v", err)
			}},
			{"one VAPID key for every store, made once; a rotate replaces it for all", func(t *testing.T, b *Backend) {
				ctx := t.Context()
				others := []store.Push{pushOf(t, b), pushOf(t, b.Another(t, Options{})), pushOf(t, b.Another(t, Options{}))}
				keys := make([][]byte, len(others))
				var wg sync.WaitGroup
				for i, p := range others {
					wg.Go(func() {
						k, err := p.VAPIDKey(ctx)
						assert.Success(t, err)
						keys[i] = k
					})
				}
				wg.Wait()
				for _, k := range keys[1:] {
					assert.True(t, slices.Equal(k, keys[0]), "two stores got different keys")
				}
				_, err := webpush.ParseVAPID(keys[0], "")
				assert.Success(t, err)
				rotated, err := others[1].RotateVAPIDKey(ctx)
				assert.Success(t, err)
				assert.True(t, !slices.Equal(rotated, keys[0]), "the rotate kept the key")
				now, err := others[2].VAPIDKey(ctx)
				assert.Success(t, err)
				assert.True(t, slices.Equal(now, rotated), "another store did not see the rotated key")
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, Open(t, backend, Options{}))
			})
		}
	})
}

// TestPushSubscriptionsLeaveWithTheirThread: the sweep that removes an
// expired thread removes its subscriptions; the same token's new thread
// starts with none.
func TestPushSubscriptionsLeaveWithTheirThread(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		clk := testclock.New(t0)
		b := Open(t, backend, Options{Now: clk.Now, Retention: chatrelay.Retention{Age: time.Hour}})
		p := pushOf(t, b)
		ctx := t.Context()
		appendText(t, b.Store, thA, "", "hello")
		_, _, err := p.PushSubscribe(ctx, thA, pushSub(1, chatrelay.SubscriberOwner))
		assert.Success(t, err)
		clk.Advance(2 * time.Hour)
		st, err := b.Store.Sweep(ctx)
		assert.Success(t, err)
		assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)
		appendText(t, b.Store, thA, "", "hello again")
		subs, err := p.PushSubscriptions(ctx, thA)
		assert.True(t, err == nil && len(subs) == 0, "the new thread's subscriptions: %v %v", subs, err)
	})
}

// TestPushClaimOnce: of two stores, one claim of a push wins on Redis
// (two nodes); the file store (one server a folder) keeps each store's
// claims in its memory. A claim whose lease lapsed unsettled (its node
// stopped) is won again; a renewed one is not; a settled one is never
// won again within its keep, and says so.
func TestPushClaimOnce(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		b := Open(t, backend, Options{})
		a, c := pushOf(t, b), pushOf(t, b.Another(t, Options{}))
		ctx := context.Background()
		ok1, _, err := a.ClaimPush(ctx, "x:1", "a", time.Minute, nil)
		assert.Success(t, err)
		ok2, settled, err := c.ClaimPush(ctx, "x:1", "c", time.Minute, nil)
		assert.Success(t, err)
		if IsRedis(backend) {
			assert.True(t, ok1 && !ok2 && !settled, "claims %v %v, settled %v", ok1, ok2, settled)
		} else {
			assert.True(t, ok1 && ok2, "claims %v %v", ok1, ok2)
		}
		again, settled, err := a.ClaimPush(ctx, "x:1", "a", time.Minute, nil)
		assert.True(t, err == nil && !again && !settled, "the same store claimed twice: %v %v", err, settled)

		// Settled: never won again, and said so, by any node of a shared
		// store (the file store's claims are each store's own).
		assert.Success(t, a.SettlePush(ctx, "x:1", time.Hour))
		askers := []store.Push{a}
		if IsRedis(backend) {
			askers = append(askers, c)
		}
		for _, st := range askers {
			won, settled, err := st.ClaimPush(ctx, "x:1", "c", time.Minute, nil)
			assert.True(t, err == nil && !won && settled, "a settled claim: won %v settled %v %v", won, settled, err)
		}
		// Renewing a settled claim leaves it as long as it was.
		assert.Success(t, a.RenewPush(ctx, []string{"x:1"}, time.Millisecond))

		// A lease that lapsed unsettled is won again; a renewed one is not.
		short, _, _ := a.ClaimPush(ctx, "x:2", "a", 50*time.Millisecond, nil)
		assert.True(t, short, "x:2")
		held, _, _ := a.ClaimPush(ctx, "x:3", "a", 50*time.Millisecond, nil)
		assert.True(t, held, "x:3")
		assert.Success(t, a.RenewPush(ctx, []string{"x:3"}, time.Hour))
		assert.Eventually(t, 5*time.Second, "a claim that lapsed is won again", func() bool {
			ok, _, err := a.ClaimPush(ctx, "x:2", "a", time.Millisecond, nil)
			return err == nil && ok
		})
		renewed, settled, err := a.ClaimPush(ctx, "x:3", "a", time.Minute, nil)
		assert.True(t, err == nil && !renewed && !settled, "a renewed claim was won again: %v", err)
		settledAgain, _, _ := a.ClaimPush(ctx, "x:1", "a", time.Minute, nil)
		assert.True(t, !settledAgain, "the renewal shortened a settled claim")
	})
}

// TestPushFilesArePrivate: the file store's subscriptions and VAPID key
// are mode 0600, and a thread's subscriptions leave with it.
func TestPushFilesArePrivate(t *testing.T) {
	t.Parallel()
	b := Open(t, File, Options{})
	p := pushOf(t, b)
	appendText(t, b.Store, thA, "", "hello")
	_, _, err := p.PushSubscribe(t.Context(), thA, pushSub(1, chatrelay.SubscriberOwner))
	assert.Success(t, err)
	_, err = p.VAPIDKey(t.Context())
	assert.Success(t, err)
	dir := b.Store.(interface{ Dir() string }).Dir()
	for _, f := range []string{filepath.Join(dir, thA+".push.json"), filepath.Join(filepath.Dir(dir), "vapid.key")} {
		fi, err := os.Stat(f)
		assert.Success(t, err)
		assert.Equal(t, f+" mode", fi.Mode().Perm(), os.FileMode(0o600))
	}
	assert.Equal(t, "threads", b.Threads(t), []string{thA})
}

// TestPushHandover: what a stopping server hands over is taken by the
// next one to start on the store (another node, or a new process on the
// same folder), in order, once; the file store's file is private.
func TestPushHandover(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		b := Open(t, backend, Options{})
		a, c := pushOf(t, b), pushOf(t, b.Another(t, Options{}))
		ctx := context.Background()
		none, err := c.TakePushes(ctx)
		assert.True(t, err == nil && len(none) == 0, "nothing handed over yet: %q %v", none, err)
		assert.Success(t, a.HandOverPushes(ctx, [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`)}))
		assert.Success(t, a.HandOverPushes(ctx, [][]byte{[]byte(`{"n":3}`)}))
		if !IsRedis(backend) {
			fi, err := os.Stat(filepath.Join(b.Dir, "push-handover.json"))
			assert.Success(t, err)
			assert.Equal(t, "the handover file's mode", fi.Mode().Perm(), os.FileMode(0o600))
		}
		got, err := c.TakePushes(ctx)
		assert.Success(t, err)
		var texts []string
		for _, d := range got {
			texts = append(texts, string(d))
		}
		assert.Equal(t, "taken", texts, []string{`{"n":1}`, `{"n":2}`, `{"n":3}`})
		again, err := a.TakePushes(ctx)
		assert.True(t, err == nil && len(again) == 0, "taken twice: %q %v", again, err)
	})
}

// journalOf is p's push journal, by claim id.
func journalOf(t *testing.T, p store.Push) map[string]string {
	t.Helper()
	entries, err := p.JournaledPushes(context.Background())
	assert.Success(t, err)
	out := map[string]string{}
	for _, e := range entries {
		out[e.ID] = string(e.Doc)
	}
	return out
}

// TestPushJournal: a claim won with a document is journaled, in the same
// write, until it is settled; a claim lost, or made without a document,
// journals nothing. A store opened after (the next server on the folder
// once the last was killed, or another node) finds the journal's
// entries, and wins the claim of one once its lease lapsed (at once on
// the file store: the claims were the dead process's); its own document
// replaces the entry, and its settle removes it for every store.
func TestPushJournal(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		b := Open(t, backend, Options{})
		a := pushOf(t, b)
		ctx := context.Background()
		assert.Equal(t, "the journal of a new store", journalOf(t, a), map[string]string{})
		for _, c := range []struct {
			id    string
			lease time.Duration
			doc   string
		}{{"j:1", 50 * time.Millisecond, `{"n":1}`}, {"j:2", time.Minute, `{"n":2}`}, {"j:3", time.Minute, ""}} {
			var doc []byte
			if c.doc != "" {
				doc = []byte(c.doc)
			}
			won, _, err := a.ClaimPush(ctx, c.id, "a", c.lease, doc)
			assert.True(t, err == nil && won, "claim %s: won %v, %v", c.id, won, err)
		}
		won, _, err := a.ClaimPush(ctx, "j:2", "a", time.Minute, []byte(`{"n":"lost"}`))
		assert.True(t, err == nil && !won, "j:2 claimed twice: %v", err)
		assert.Success(t, a.SettlePush(ctx, "j:2", time.Hour))
		assert.Equal(t, "the journal", journalOf(t, a), map[string]string{"j:1": `{"n":1}`})

		c := pushOf(t, b.Another(t, Options{}))
		assert.Equal(t, "the journal another store finds", journalOf(t, c), map[string]string{"j:1": `{"n":1}`})
		if !IsRedis(backend) {
			fi, err := os.Stat(filepath.Join(b.Dir, "push-journal.log"))
			assert.Success(t, err)
			assert.Equal(t, "the journal file's mode", fi.Mode().Perm(), os.FileMode(0o600))
		}
		assert.Eventually(t, 5*time.Second, "the journaled claim won once its lease lapsed", func() bool {
			won, _, err := c.ClaimPush(ctx, "j:1", "c", time.Minute, []byte(`{"n":"c"}`))
			return err == nil && won
		})
		assert.Equal(t, "the journal once claimed again", journalOf(t, c), map[string]string{"j:1": `{"n":"c"}`})
		assert.Success(t, c.SettlePush(ctx, "j:1", time.Hour))
		assert.Equal(t, "the journal once settled", journalOf(t, c), map[string]string{})
		assert.Equal(t, "the journal a store opened after finds", journalOf(t, pushOf(t, b.Another(t, Options{}))), map[string]string{})
	})
}

// TestPushJournalFile: the file store's journal, read at the next start,
// drops a torn last line (a machine that crashed mid-write) and the
// entries older than the push window (nothing is sent of them), keeps the
// others, and is written again with its live entries alone once it has
// grown: claims and settles do not make it grow without bound.
func TestPushJournalFile(t *testing.T) {
	t.Parallel()
	clk := testclock.New(time.Now())
	b := Open(t, File, Options{Now: clk.Now})
	a := pushOf(t, b)
	ctx := context.Background()
	_, _, err := a.ClaimPush(ctx, "old", "a", time.Minute, []byte(`{"n":"old"}`))
	assert.Success(t, err)
	clk.Advance(chatrelay.DefaultPushWindow + chatrelay.DefaultPushLease + time.Second)
	_, _, err = a.ClaimPush(ctx, "new", "a", time.Minute, []byte(`{"n":"new"}`))
	assert.Success(t, err)
	path := filepath.Join(b.Dir, "push-journal.log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	assert.Success(t, err)
	_, err = f.WriteString(`{"claim":"torn","at":1`)
	assert.Success(t, err)
	f.Close()
	c := pushOf(t, b.Another(t, Options{Now: clk.Now}))
	assert.Equal(t, "the journal read at the next start", journalOf(t, c), map[string]string{"new": `{"n":"new"}`})

	for i := range 2000 {
		id := fmt.Sprintf("x:%d", i)
		_, _, err := c.ClaimPush(ctx, id, "c", time.Minute, []byte(`{"n":0}`))
		assert.Success(t, err)
		assert.Success(t, c.SettlePush(ctx, id, time.Minute))
	}
	data, err := os.ReadFile(path)
	assert.Success(t, err)
	n := strings.Count(string(data), "\n")
	assert.True(t, n < 1100, "the journal has %d lines after 2000 claims settled", n)
	assert.Equal(t, "the journal after", journalOf(t, pushOf(t, b.Another(t, Options{Now: clk.Now}))), map[string]string{"new": `{"n":"new"}`})
}

// TestPushJournalFileEmptiesOnceSettled: once every change the file
// store's journal holds is settled, the file holds none of their
// documents: a settled change's message text (the stored, unredacted
// text of a thread the sweep may remove) stays in no file until 1 024
// lines have piled up or the server starts again.
func TestPushJournalFileEmptiesOnceSettled(t *testing.T) {
	t.Parallel()
	b := Open(t, File, Options{})
	a := pushOf(t, b)
	ctx := context.Background()
	for _, id := range []string{"t:1:reply", "t:2:interaction"} {
		_, _, err := a.ClaimPush(ctx, id, "a", time.Minute, []byte(`{"message":{"text":"password=hunter2"}}`))
		assert.Success(t, err)
	}
	path := filepath.Join(b.Dir, "push-journal.log")
	assert.Success(t, a.SettlePush(ctx, "t:1:reply", time.Minute))
	data, err := os.ReadFile(path)
	assert.Success(t, err)
	assert.True(t, strings.Contains(string(data), "hunter2"), "the journal lost a change not yet settled: %q", data)
	assert.Success(t, a.SettlePush(ctx, "t:2:interaction", time.Minute))
	data, err = os.ReadFile(path)
	assert.Success(t, err)
	assert.Equal(t, "the journal file once every change is settled", string(data), "")
	_, _, err = a.ClaimPush(ctx, "t:3:reply", "a", time.Minute, []byte(`{"n":3}`))
	assert.Success(t, err)
	assert.Equal(t, "the journal a store opened after finds", journalOf(t, pushOf(t, b.Another(t, Options{}))), map[string]string{"t:3:reply": `{"n":3}`})
}
