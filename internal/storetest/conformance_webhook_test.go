package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/internal/webhooktest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webhook"
)

// Webhooks (contract Part 5): every write of a store opened with
// Options.Webhooks queues its events, and a deliverer sends them to a
// receiver that verifies them with the Standard Webhooks library.

// deliver runs a deliverer of b's outbox to the receivers until the test ends.
func deliver(t *testing.T, b *Backend, clk *testclock.Clock, rs ...*webhooktest.Receiver) *webhook.Deliverer {
	t.Helper()
	var urls []string
	for _, r := range rs {
		urls = append(urls, r.URL)
	}
	key, err := webhook.ParseSecret(rs[0].Secret)
	assert.Success(t, err)
	d, err := webhook.New(webhook.Config{URLs: urls, Keys: [][]byte{key}, Outbox: b.Outbox, Now: clk.Now, Poll: 5 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

func hookOptions(clk *testclock.Clock, rs ...*webhooktest.Receiver) Options {
	opt := Options{Now: clk.Now}
	for _, r := range rs {
		opt.Webhooks = append(opt.Webhooks, store.DestinationID(r.URL))
	}
	return opt
}

// openRetained opens backend with retention r, queuing events for a new
// receiver, on a test clock.
func openRetained(t *testing.T, backend string, r chatrelay.Retention) (*testclock.Clock, *webhooktest.Receiver, *Backend) {
	t.Helper()
	clk := testclock.New(time.Now())
	rcv := webhooktest.Start(t, webhooktest.NewSecret())
	opt := hookOptions(clk, rcv)
	opt.Retention = r
	return clk, rcv, Open(t, backend, opt)
}

func types(ds []webhooktest.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Event.Type)
	}
	return out
}

func TestConformanceWebhooks(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		t.Run("every event type reaches the receiver, signed, with its message as stored", func(t *testing.T) {
			clk := testclock.New(time.Now())
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			b := Open(t, backend, hookOptions(clk, rcv))
			deliver(t, b, clk, rcv)

			op := appendText(t, b.Store, thA, chatrelay.Operator, "deploy when ready, key sk-live-0123456789abcdef0123")
			appendText(t, b.Store, thA, chatrelay.Hermes, "on it") // hermes's own: no event
			ix := ask(t, b.Store, thA, approval)
			_, err := change(b.Store, thA, store.Change{Op: store.React, MessageID: op.ID, Emoji: "👍", By: chatrelay.Hermes})
			assert.Success(t, err) // a reaction: no event
			ans, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
			assert.Success(t, err)

			want := []string{store.EventMessageCreated, store.EventInteractionOpened, store.EventInteractionClosed}
			assert.Eventually(t, 10*time.Second, "three events accepted", func() bool { return len(rcv.Accepted()) >= 3 })
			got := rcv.All() // in any order: attempts run concurrently
			slices.SortFunc(got, func(a, b webhooktest.Delivery) int {
				return slices.Index(want, a.Event.Type) - slices.Index(want, b.Event.Type)
			})
			assert.Equal(t, "types", types(got), want)
			ids := map[string]bool{}
			for i, d := range got {
				assert.True(t, d.Valid, "event %d does not verify: %s", i, d.Err)
				assert.Equal(t, "thread", d.Event.Data.Thread, thA)
				_, err := time.Parse(time.RFC3339, d.Event.Timestamp)
				assert.Success(t, err)
				ids[d.ID] = true
			}
			assert.Equal(t, "distinct ids", len(ids), 3)
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(got[0].Event.Data.Message, &m))
			assert.Equal(t, "the stored text, unredacted", m.Text, op.Text)
			assert.Equal(t, "rev", m.Rev, op.Epoch)
			assert.Success(t, json.Unmarshal(got[2].Event.Data.Message, &m))
			assert.Equal(t, "the closed interaction's state", m.Interaction.State, chatrelay.Approved)
			assert.Equal(t, "its rev", m.Rev, ans.Rev)
		})

		t.Run("an interaction answered or canceled after later messages is interaction.closed", func(t *testing.T) {
			// A receiver saw interaction.closed only when the interaction
			// was the thread's newest message: an approval asked, then
			// another question or a reply, then the approval answered,
			// and no event came.
			clk := testclock.New(time.Now())
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			b := Open(t, backend, hookOptions(clk, rcv))
			deliver(t, b, clk, rcv)

			appendText(t, b.Store, thA, chatrelay.Operator, "can you deploy?")
			first := ask(t, b.Store, thA, approval)
			second := ask(t, b.Store, thA, approval)
			appendText(t, b.Store, thA, chatrelay.Hermes, "asked twice") // hermes's own: no event
			_, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: first.Interaction.ID, Answer: chatrelay.Answer{Decision: chatrelay.Deny}, By: chatrelay.Operator})
			assert.Success(t, err)
			_, err = change(b.Store, thA, store.Change{Op: store.Cancel, InteractionID: second.Interaction.ID, By: chatrelay.Hermes})
			assert.Success(t, err)

			closed := func() map[string]chatrelay.State {
				out := map[string]chatrelay.State{}
				for _, d := range rcv.Accepted() {
					var m chatrelay.Message
					if d.Event.Type != store.EventInteractionClosed || json.Unmarshal(d.Event.Data.Message, &m) != nil || m.Interaction == nil {
						continue
					}
					out[m.Interaction.ID] = m.Interaction.State
				}
				return out
			}
			assert.Eventually(t, 10*time.Second, "both interactions' interaction.closed accepted", func() bool { return len(closed()) >= 2 })
			assert.Equal(t, "closed", closed(), map[string]chatrelay.State{
				first.Interaction.ID: chatrelay.Denied, second.Interaction.ID: chatrelay.Canceled})
		})

		t.Run("a grant's first use is participant.joined, its revoke or noticed expiry participant.revoked, once each", func(t *testing.T) {
			clk := testclock.New(time.Now())
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			b := Open(t, backend, hookOptions(clk, rcv))
			deliver(t, b, clk, rcv)
			ctx := context.Background()
			p := participants(t, b)
			appendText(t, b.Store, thA, chatrelay.Hermes, "hello") // hermes's: no event
			alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
			bo, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo", Role: chatrelay.Viewer, ExpiresIn: time.Hour})
			// The owner's device, kept on the same record, is no participant: no event.
			dev, _ := chatrelay.DeviceRequest{Name: "phone", ExpiresIn: time.Hour}.Grant(clk.Now())
			assert.Success(t, p.Invite(ctx, thA, dev))
			_, err := p.Seen(ctx, thA, dev.ID, clk.Now().UnixMilli())
			assert.Success(t, err)
			_, err = p.Revoke(ctx, thA, dev.ID)
			assert.Success(t, err)
			for range 2 {
				_, err := p.MarkUsed(ctx, thA, alex.ID)
				assert.Success(t, err)
			}
			_, err = p.Revoke(ctx, thA, alex.ID)
			assert.Success(t, err)
			clk.Advance(2 * time.Hour)
			_, err = p.NoteExpired(ctx, thA, bo.ID)
			assert.Success(t, err)
			_, err = p.Revoke(ctx, thA, bo.ID) // ended already: no second event
			assert.Success(t, err)
			_, err = p.Revoke(ctx, thA, alex.ID) // revoked already
			assert.Success(t, err)
			appendText(t, b.Store, thA, chatrelay.Operator, "marker")

			assert.Eventually(t, 10*time.Second, "four events accepted", func() bool {
				ids := map[string]bool{}
				for _, d := range rcv.Accepted() {
					ids[d.ID] = true
				}
				return len(ids) >= 4
			})
			got := map[string][]string{}
			seen := map[string]bool{}
			for _, d := range rcv.All() {
				assert.True(t, d.Valid, "%s does not verify: %s", d.Event.Type, d.Err)
				if d.Event.Type == store.EventMessageCreated || seen[d.ID] {
					continue // a receiver deduplicates by webhook-id: the clock's jump of 2 h passes the leases of attempts in flight
				}
				seen[d.ID] = true
				var body struct {
					Data struct {
						Thread      string                `json:"thread"`
						Participant chatrelay.Participant `json:"participant"`
						Message     json.RawMessage       `json:"message"`
					} `json:"data"`
				}
				assert.Success(t, json.Unmarshal(d.Body, &body))
				assert.Equal(t, "thread", body.Data.Thread, thA)
				assert.True(t, body.Data.Message == nil, "a participant's event carries a message: %s", body.Data.Message)
				got[d.Event.Type] = append(got[d.Event.Type], body.Data.Participant.Name+" "+string(body.Data.Participant.State))
			}
			slices.Sort(got[store.EventParticipantRevoked])
			assert.Equal(t, "events", got, map[string][]string{
				store.EventParticipantJoined:  {"Alex active"},
				store.EventParticipantRevoked: {"Alex revoked", "Bo expired"},
			})
		})

		t.Run("a receiver down then up gets each event, with the same webhook-id, on the schedule", func(t *testing.T) {
			clk := testclock.New(time.Now())
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			rcv.SetDown(true)
			b := Open(t, backend, hookOptions(clk, rcv))
			d := deliver(t, b, clk, rcv)
			appendText(t, b.Store, thA, chatrelay.Operator, "one")
			appendText(t, b.Store, thA, chatrelay.Operator, "two")
			assert.Eventually(t, 10*time.Second, "two failed attempts", func() bool {
				return testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultFailed)) == 2
			})
			// Not due before the first retry's 5 s.
			clk.Advance(4 * time.Second)
			rcv.SetDown(false)
			assert.Equal(t, "attempts before the retry is due", len(rcv.All()), 2)
			clk.Advance(time.Second)
			assert.Eventually(t, 10*time.Second, "both delivered", func() bool {
				return testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultDelivered)) == 2
			})
			all := rcv.All()
			first := []string{all[0].ID, all[1].ID}
			again := []string{all[2].ID, all[3].ID}
			slices.Sort(first)
			slices.Sort(again)
			assert.Equal(t, "the retries' webhook-ids", again, first)
			assert.Equal(t, "failed", testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultFailed)), 2.0)
			assert.Equal(t, "delivered", testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultDelivered)), 2.0)
		})

		t.Run("an event that fails every retry is dropped after the last and counted", func(t *testing.T) {
			clk := testclock.New(time.Now())
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			rcv.SetDown(true)
			b := Open(t, backend, hookOptions(clk, rcv))
			d := deliver(t, b, clk, rcv)
			appendText(t, b.Store, thA, chatrelay.Operator, "nobody home")
			failed := d.Counter().WithLabelValues(webhook.ResultFailed)
			for i, wait := range chatrelay.WebhookSchedule {
				assert.Eventually(t, 10*time.Second, "attempt settled", func() bool { return testutil.ToFloat64(failed) == float64(i+1) })
				clk.Advance(wait - time.Millisecond)
				assert.Equal(t, "attempts before the retry is due", len(rcv.All()), i+1)
				clk.Advance(time.Millisecond)
			}
			assert.Eventually(t, 10*time.Second, "dropped", func() bool {
				return testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultDropped)) == 1
			})
			clk.Advance(24 * time.Hour)
			assert.Equal(t, "attempts: the first and one per retry", len(rcv.All()), len(chatrelay.WebhookSchedule)+1)
		})

		t.Run("an interaction retention drops while pending is interaction.closed, expired", func(t *testing.T) {
			// Dropped on append (past the newest 3 messages), by the sweep
			// (past the age), and with its thread when the sweep removes
			// it: a receiver that waited for its interaction.closed never
			// got one, and waited for good.
			expired := func(rcv *webhooktest.Receiver, id string) (chatrelay.Message, bool) {
				for _, d := range rcv.Accepted() {
					var m chatrelay.Message
					if d.Event.Type == store.EventInteractionClosed && json.Unmarshal(d.Event.Data.Message, &m) == nil &&
						m.Interaction != nil && m.Interaction.ID == id {
						return m, true
					}
				}
				return chatrelay.Message{}, false
			}
			for _, how := range []string{"on append", "by the sweep", "with its thread"} {
				t.Run(how, func(t *testing.T) {
					clk, rcv, b := openRetained(t, backend, chatrelay.Retention{Messages: 3, Age: time.Hour})
					deliver(t, b, clk, rcv)
					appendText(t, b.Store, thA, chatrelay.Operator, "can you deploy?")
					ix := ask(t, b.Store, thA, approval)
					switch how {
					case "on append":
						for i := range 3 {
							appendText(t, b.Store, thA, chatrelay.Hermes, fmt.Sprint("later ", i))
						}
					case "by the sweep":
						clk.Advance(30 * time.Minute)
						appendText(t, b.Store, thA, chatrelay.Hermes, "later")
						clk.Advance(45 * time.Minute)
					case "with its thread":
						clk.Advance(2 * time.Hour)
					}
					if how != "on append" {
						st, err := b.Store.Sweep(context.Background())
						assert.Success(t, err)
						assert.Equal(t, "threads removed", st.ThreadsRemoved, map[bool]int{true: 1}[how == "with its thread"])
					}
					p, err := b.Store.Since(context.Background(), thA, 0, 0)
					if how != "with its thread" {
						assert.Success(t, err)
						assert.True(t, len(p.Messages) > 0 && p.Messages[0].ID != ix.ID, "the interaction is still stored: %d messages", len(p.Messages))
					}
					var m chatrelay.Message
					assert.Eventually(t, 10*time.Second, "its interaction.closed accepted", func() bool {
						var ok bool
						m, ok = expired(rcv, ix.Interaction.ID)
						return ok
					})
					assert.Equal(t, "state", m.Interaction.State, chatrelay.Expired)
					assert.Equal(t, "message", m.ID, ix.ID)
					assert.True(t, m.Interaction.AnsweredAt >= ix.Epoch && m.Rev >= m.Interaction.AnsweredAt, "answered_at %d, rev %d, asked at %d", m.Interaction.AnsweredAt, m.Rev, ix.Epoch)
					n := 0
					for _, d := range rcv.Accepted() {
						if d.Event.Type == store.EventInteractionClosed {
							n++
						}
					}
					assert.Equal(t, "interaction.closed events", n, 1)
				})
			}
		})

		t.Run("the links still active when the sweep removes their thread are participant.revoked", func(t *testing.T) {
			// Alex's link was active, Bo's revoked before, the owner's
			// device is no participant: Alex's participant.revoked, at
			// the removal, is the one event the removal adds. The links
			// ended with no event: a receiver kept Alex as a participant.
			clk, rcv, b := openRetained(t, backend, chatrelay.Retention{Age: time.Hour})
			deliver(t, b, clk, rcv)
			ctx := context.Background()
			p := participants(t, b)
			appendText(t, b.Store, thA, chatrelay.Hermes, "hello") // hermes's: no event
			alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter, ExpiresIn: 24 * time.Hour})
			bo, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo", Role: chatrelay.Viewer, ExpiresIn: 24 * time.Hour})
			dev, _ := chatrelay.DeviceRequest{Name: "phone", ExpiresIn: 24 * time.Hour}.Grant(clk.Now())
			assert.Success(t, p.Invite(ctx, thA, dev))
			_, err := p.Revoke(ctx, thA, bo.ID)
			assert.Success(t, err)
			clk.Advance(2 * time.Hour)
			st, err := b.Store.Sweep(ctx)
			assert.Success(t, err)
			assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)

			revoked := func() map[string]chatrelay.Participant {
				out := map[string]chatrelay.Participant{}
				for _, d := range rcv.Accepted() {
					var body struct {
						Data struct {
							Participant chatrelay.Participant `json:"participant"`
						} `json:"data"`
					}
					if d.Event.Type == store.EventParticipantRevoked && json.Unmarshal(d.Body, &body) == nil {
						out[body.Data.Participant.ID] = body.Data.Participant
					}
				}
				return out
			}
			assert.Eventually(t, 10*time.Second, "Alex's and Bo's participant.revoked accepted", func() bool { return len(revoked()) >= 2 })
			got := revoked()
			assert.Equal(t, "revoked", len(got), 2)
			a := got[alex.ID]
			assert.True(t, a.Name == "Alex" && a.State == chatrelay.Revoked && a.ExpiresAt == alex.ExpiresAt, "Alex at the removal: %+v", a)
			assert.Equal(t, "Bo, at the revoke", got[bo.ID].State, chatrelay.Revoked)
			for _, d := range rcv.Accepted() {
				assert.True(t, !strings.Contains(string(d.Body), alex.Digest) && !strings.Contains(string(d.Body), `"digest"`), "an event holds a digest: %s", d.Body)
			}
		})

		t.Run("an event still retried once retention has removed its thread is delivered", func(t *testing.T) {
			// With --retention-age shorter than the retries (4 h 12 min),
			// a quiet thread's messages expire and the sweep removes the
			// thread while its events wait for a receiver that is down.
			// The file store confirmed each event again at every retry,
			// found no document, and dropped it as a change never stored
			// (neither counted nor logged as a drop); Redis sent it.
			clk, rcv, b := openRetained(t, backend, chatrelay.Retention{Age: time.Hour})
			rcv.SetDown(true)
			d := deliver(t, b, clk, rcv)
			appendText(t, b.Store, thA, chatrelay.Operator, "while the receiver is down")
			failed := d.Counter().WithLabelValues(webhook.ResultFailed)
			schedule := chatrelay.WebhookSchedule
			for i, wait := range schedule[:len(schedule)-1] { // every retry but the last has failed
				assert.Eventually(t, 10*time.Second, "attempt settled", func() bool { return testutil.ToFloat64(failed) == float64(i+1) })
				clk.Advance(wait)
			}
			assert.Eventually(t, 10*time.Second, "attempt settled", func() bool { return testutil.ToFloat64(failed) == float64(len(schedule)) })
			st, err := b.Store.Sweep(context.Background()) // over an hour later: the message has expired
			assert.Success(t, err)
			assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)

			rcv.SetDown(false)
			clk.Advance(schedule[len(schedule)-1]) // the last retry
			assert.Eventually(t, 10*time.Second, "delivered", func() bool {
				return testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultDelivered)) == 1
			})
			got := rcv.Accepted()
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(got[len(got)-1].Event.Data.Message, &m))
			assert.Equal(t, "its text", m.Text, "while the receiver is down")
		})

		t.Run("an event not yet attempted when retention removes its thread is delivered", func(t *testing.T) {
			// No deliverer ran before the sweep (a server stopped longer
			// than --retention-age, whose sweep at start runs before its
			// deliverer takes the queue): the file store's first attempt
			// found no document and dropped the event as a change never
			// stored; Redis sent it (lifeprobe).
			clk, rcv, b := openRetained(t, backend, chatrelay.Retention{Age: time.Hour})
			appendText(t, b.Store, thA, chatrelay.Operator, "before the long stop")
			clk.Advance(2 * time.Hour)
			st, err := b.Store.Sweep(context.Background())
			assert.Success(t, err)
			assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)

			d := deliver(t, b, clk, rcv)
			assert.Eventually(t, 10*time.Second, "delivered", func() bool {
				return testutil.ToFloat64(d.Counter().WithLabelValues(webhook.ResultDelivered)) == 1
			})
			got := rcv.Accepted()
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(got[len(got)-1].Event.Data.Message, &m))
			assert.Equal(t, "its text", m.Text, "before the long stop")
		})

	})
}

// TestRedisWebhooksTwoNodes: two nodes on one Redis (or on the shards of
// a cluster or of two instances, writing threads of several shards), each
// with its own deliverer of the same destination, deliver each event once
// (the normal case: no node dies).
func TestRedisWebhooksTwoNodes(t *testing.T) {
	for _, backend := range []string{Redis, RedisCluster, RedisShards} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			redisWebhooksTwoNodes(t, backend)
		})
	}
}

func redisWebhooksTwoNodes(t *testing.T, backend string) {
	clk := testclock.New(time.Now())
	rcv := webhooktest.Start(t, webhooktest.NewSecret())
	a := Open(t, backend, hookOptions(clk, rcv))
	b := a.Another(t, hookOptions(clk, rcv))
	da, db := deliver(t, a, clk, rcv), deliver(t, b, clk, rcv)
	const n = 60
	for i := range n {
		node := a
		if i%2 == 1 {
			node = b
		}
		appendText(t, node.Store, []string{thA, thB, thC}[i%3], chatrelay.Operator, "message")
	}
	delivered := func() float64 {
		return testutil.ToFloat64(da.Counter().WithLabelValues(webhook.ResultDelivered)) +
			testutil.ToFloat64(db.Counter().WithLabelValues(webhook.ResultDelivered))
	}
	assert.Eventually(t, 20*time.Second, "every event delivered", func() bool { return delivered() >= n })
	appendText(t, a.Store, thA, chatrelay.Operator, "marker")
	assert.Eventually(t, 20*time.Second, "the marker delivered", func() bool { return delivered() >= n+1 })
	ids := map[string]int{}
	for _, d := range rcv.All() {
		ids[d.ID]++
	}
	assert.Equal(t, "distinct events", len(ids), n+1)
	for id, k := range ids {
		assert.Equal(t, "deliveries of "+id, k, 1)
	}
	assert.True(t, testutil.ToFloat64(da.Counter().WithLabelValues(webhook.ResultDelivered)) > 0 &&
		testutil.ToFloat64(db.Counter().WithLabelValues(webhook.ResultDelivered)) > 0, "both nodes delivered")
}

// TestRedisWebhookLeaseUnderSkew: node A takes an event to send it; node
// B, whose clock runs a minute ahead, looks for events due. A holds the
// event for WebhookLease (30 s) while it sends it, so B must not be handed
// it: each event is sent by one node at a time. The lease was A's clock +
// 30 s, compared with B's, so B took the event at once and sent it while
// A still was; Redis's own clock (how long the event sat idle) now
// measures the lease, whatever the nodes' clocks. A failed attempt's
// retry is still due at the time its node set.
func TestRedisWebhookLeaseUnderSkew(t *testing.T) {
	for _, backend := range []string{Redis, RedisShards} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ca := testclock.New(time.Now())
			cb := testclock.New(ca.Now().Add(time.Minute))
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			dest := store.DestinationID(rcv.URL)
			a := Open(t, backend, hookOptions(ca, rcv))
			b := a.Another(t, hookOptions(cb, rcv))
			appendText(t, a.Store, thA, chatrelay.Operator, "message")
			ctx := t.Context()
			took, err := a.Outbox.Take(ctx, dest, ca.Now(), 10)
			assert.Success(t, err)
			assert.Equal(t, "events A took", len(took), 1)
			got, err := b.Outbox.Take(ctx, dest, cb.Now(), 10)
			assert.Success(t, err)
			assert.Equal(t, "events B took while A holds the only one", len(got), 0)

			// A's attempt failed: retry in 5 s on A's clock, which B's
			// has passed: B may take it (a retry, not in flight).
			assert.Success(t, a.Outbox.Retry(ctx, dest, took[0], ca.Now().Add(5*time.Second)))
			got, err = b.Outbox.Take(ctx, dest, cb.Now(), 10)
			assert.Success(t, err)
			assert.Equal(t, "events B took once A let it go", len(got), 1)
			again, err := a.Outbox.Take(ctx, dest, ca.Now().Add(10*time.Second), 10)
			assert.Success(t, err)
			assert.Equal(t, "events A took while B holds it", len(again), 0)
			assert.Success(t, b.Outbox.Done(ctx, dest, got[0]))
		})
	}
}

// TestConformanceWebhookGoneSurvivesRestart: a receiver that answered 410
// Gone wants no more events (Standard Webhooks: the sender disables the
// endpoint). The server that got the 410 stopped sending to it, but only
// in memory: a restart (or another node) sent it events again. The store
// now records it disabled, until the operator enables it again.
func TestConformanceWebhookGoneSurvivesRestart(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		clk := testclock.New(time.Now())
		rcv := webhooktest.Start(t, webhooktest.NewSecret())
		rcv.SetGone(true)
		a := Open(t, backend, hookOptions(clk, rcv))
		ctx, stop := context.WithCancel(context.Background())
		key, err := webhook.ParseSecret(rcv.Secret)
		assert.Success(t, err)
		da, err := webhook.New(webhook.Config{URLs: []string{rcv.URL}, Keys: [][]byte{key}, Outbox: a.Outbox, Now: clk.Now,
			Poll: 5 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
		assert.Success(t, err)
		stopped := make(chan struct{})
		go func() { da.Run(ctx); close(stopped) }()
		appendText(t, a.Store, thA, chatrelay.Operator, "answered 410")
		assert.Eventually(t, 10*time.Second, "the 410 counted gone", func() bool {
			return testutil.ToFloat64(da.Counter().WithLabelValues(webhook.ResultGone)) >= 1
		})
		stop()
		<-stopped
		// Stopped cleanly: the file store saves its queue's progress at
		// Close. Left open, the next store takes the 410's event again
		// (at least once, as after a crash), and the count below could
		// be that one given up again, not the event after the restart,
		// which the enable then let through.
		a.Close()

		// The server starts again (or another node delivers).
		b := a.Another(t, hookOptions(clk, rcv))
		db := deliver(t, b, clk, rcv)
		appendText(t, b.Store, thA, chatrelay.Operator, "after the restart")
		assert.Eventually(t, 10*time.Second, "the event after the restart given up", func() bool {
			return testutil.ToFloat64(db.Counter().WithLabelValues(webhook.ResultGone)) >= 1
		})
		assert.Equal(t, "requests the receiver got (the one answered 410)", len(rcv.All()), 1)

		// The operator enables it again: it is sent events.
		rcv.SetGone(false)
		dis, ok := b.Outbox.(store.Disabler)
		assert.True(t, ok, "the outbox records disabled destinations")
		assert.Success(t, dis.Enable(context.Background(), store.DestinationID(rcv.URL)))
		appendText(t, b.Store, thA, chatrelay.Operator, "enabled again")
		assert.Eventually(t, 10*time.Second, "the event after the enable delivered", func() bool { return len(rcv.Accepted()) == 1 })
	})
}
