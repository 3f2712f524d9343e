package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// The v2 part of the conformance suite: changes and the v2 cursor,
// interactions (first answer wins), reactions, idempotent appends.

func ask(t *testing.T, st store.Store, thread string, a chatrelay.Ask) store.Entry {
	t.Helper()
	e, err := st.Append(context.Background(), thread, store.NewMessage{Author: chatrelay.Hermes, Ask: &a, MustExist: true})
	assert.Success(t, err)
	return e
}

func change(st store.Store, thread string, c store.Change) (store.Entry, error) {
	return st.Change(context.Background(), thread, c)
}

var approval = chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy build 412 to production?",
	Details: []chatrelay.Detail{{Label: "build", Value: "412"}}, Timeout: time.Hour}

var input = chatrelay.Ask{Type: chatrelay.Input, Prompt: "Which branch?",
	Choices: []chatrelay.Choice{{Value: "main", Label: "Main branch"}, {Value: "release"}}, Timeout: 10 * time.Minute}

func TestConformanceV2(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		for _, tc := range []struct {
			name string
			opt  Options
			run  func(t *testing.T, b *Backend, clk *testclock.Clock)
		}{
			{"every change takes the next epoch; Changes answers each message changed after a cursor once, in change order", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				m1 := appendText(t, b.Store, thA, "", "first")
				ix := ask(t, b.Store, thA, approval)
				m3 := appendText(t, b.Store, thA, "", "third")
				r1, err := change(b.Store, thA, store.Change{Op: store.React, MessageID: m1.ID, Emoji: "👍", By: chatrelay.Hermes})
				assert.Success(t, err)
				ans, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
				assert.Success(t, err)
				m4 := appendText(t, b.Store, thA, "", "fourth")
				// The clock stood still: one strictly increasing sequence all the same.
				revs := []int64{m1.Epoch, ix.Epoch, m3.Epoch, r1.Rev, ans.Rev, m4.Epoch}
				for i := 1; i < len(revs); i++ {
					assert.True(t, revs[i] > revs[i-1], "change %d has epoch %d after %d", i, revs[i], revs[i-1])
				}
				assert.Equal(t, "a reacted message keeps its epoch", r1.Epoch, m1.Epoch)
				// Resume from every cursor position.
				type state struct {
					id  string
					rev int64
				}
				current := []state{{m1.ID, r1.Rev}, {ix.ID, ans.Rev}, {m3.ID, m3.Epoch}, {m4.ID, m4.Epoch}}
				for _, c := range append([]int64{0}, revs...) {
					p, err := b.Store.Changes(context.Background(), thA, c, 0)
					assert.Success(t, err)
					var want []state
					for _, rev := range revs {
						for _, s := range current {
							if s.rev == rev && rev > c {
								want = append(want, s)
							}
						}
					}
					if c == 0 { // no cursor: the messages, oldest first
						want = []state{current[0], current[1], current[2], current[3]}
					}
					var got []state
					for _, e := range p.Messages {
						got = append(got, state{e.ID, e.Rev})
					}
					assert.Equal(t, "changes after "+time.UnixMilli(c).String(), got, want)
					assert.Equal(t, "v2 cursor", p.Cursor, m4.Epoch)
				}
				// v1 ignores changes: the cursor is the newest message's epoch,
				// and a v1 object carries no v2 field.
				p := since(t, b.Store, thA, 0, 0)
				assert.Equal(t, "v1 cursor", p.Cursor, m4.Epoch)
				for _, e := range p.Messages {
					var fields map[string]any
					assert.Success(t, json.Unmarshal(e.JSON, &fields))
					assert.Equal(t, "v1 fields of "+e.ID, len(fields), 5)
				}
				p = since(t, b.Store, thA, m3.Epoch, 0)
				assert.Equal(t, "v1 after a cursor: new messages only", len(p.Messages), 1)
			}},
			{"the first answer wins, across stores of the same data", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				ix := ask(t, b.Store, thA, input)
				stores := []store.Store{b.Store, b.Another(t, Options{Now: clk.Now}).Store, b.Another(t, Options{Now: clk.Now}).Store}
				var wg sync.WaitGroup
				var mu sync.Mutex
				won, closed := 0, 0
				var winner string
				for i := range 20 {
					value := []string{"main", "release"}[i%2]
					wg.Go(func() {
						e, err := change(stores[i%3], thA, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Value: value}, By: chatrelay.Operator})
						mu.Lock()
						defer mu.Unlock()
						switch chatrelay.CodeOf(err) {
						case "":
							won++
							winner = e.Interaction.Answer.Value
						case chatrelay.InteractionClosed:
							closed++
							var ce *chatrelay.Error
							if !errors.As(err, &ce) || !bytes.Contains(ce.About, []byte(`"state":"answered"`)) {
								t.Errorf("a refused answer does not carry the answered message: %v", err)
							}
						default:
							t.Errorf("answer: %v", err)
						}
					})
				}
				wg.Wait()
				assert.Equal(t, "answers that won", won, 1)
				assert.Equal(t, "answers refused", closed, 19)
				p, err := b.Store.Changes(context.Background(), thA, 0, 0)
				assert.Success(t, err)
				got := p.Messages[1].Interaction
				assert.Equal(t, "stored answer", got.Answer.Value, winner)
				assert.Equal(t, "state", got.State, chatrelay.Answered)
				assert.Equal(t, "answered_by", got.AnsweredBy, chatrelay.Operator)
			}},
			{"an answer at the deadline is refused and stores the expiry; expiry is stored once", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				ix := ask(t, b.Store, thA, approval)
				id := ix.Interaction.ID
				e, err := change(b.Store, thA, store.Change{Op: store.Expire, InteractionID: id})
				assert.Success(t, err)
				assert.Equal(t, "expire before the deadline changes nothing", e.Rev, ix.Rev)
				clk.Advance(time.Hour)
				_, err = change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: id, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
				assert.Code(t, err, chatrelay.InteractionClosed)
				e, err = change(b.Store, thA, store.Change{Op: store.Expire, InteractionID: id})
				assert.Success(t, err)
				assert.Equal(t, "state", e.Interaction.State, chatrelay.Expired)
				assert.Equal(t, "answered_at is the deadline", e.Interaction.AnsweredAt, ix.Interaction.Deadline)
				again, err := b.Another(t, Options{Now: clk.Now}).Store.Change(context.Background(), thA, store.Change{Op: store.Expire, InteractionID: id})
				assert.Success(t, err)
				assert.Equal(t, "a second expiry (another node's) changes nothing", again.Rev, e.Rev)
				pending, err := b.Store.Pending(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "pending after expiry", len(pending), 0)
			}},
			{"cancel: hermes withdraws; later answers and cancels are refused", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				ix := ask(t, b.Store, thA, input)
				pending, err := b.Store.Pending(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "pending", pending, []store.PendingInteraction{{Thread: thA, InteractionID: ix.Interaction.ID, Deadline: ix.Interaction.Deadline}})
				e, err := change(b.Store, thA, store.Change{Op: store.Cancel, InteractionID: ix.Interaction.ID, By: chatrelay.Hermes})
				assert.Success(t, err)
				assert.Equal(t, "state", e.Interaction.State, chatrelay.Canceled)
				_, err = change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator})
				assert.Code(t, err, chatrelay.InteractionClosed)
				_, err = change(b.Store, thA, store.Change{Op: store.Cancel, InteractionID: ix.Interaction.ID, By: chatrelay.Hermes})
				assert.Code(t, err, chatrelay.InteractionClosed)
			}},
			{"answers that do not fit are refused and change nothing", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				in := ask(t, b.Store, thA, input)
				ap := ask(t, b.Store, thA, approval)
				textual := input
				textual.AllowText = true
				tx := ask(t, b.Store, thA, textual)
				for _, c := range []struct {
					id  string
					ans chatrelay.Answer
				}{
					{in.Interaction.ID, chatrelay.Answer{Decision: chatrelay.Approve}},
					{in.Interaction.ID, chatrelay.Answer{Value: "develop"}},
					{in.Interaction.ID, chatrelay.Answer{}},
					{ap.Interaction.ID, chatrelay.Answer{Value: "main"}},
					{ap.Interaction.ID, chatrelay.Answer{Decision: "maybe"}},
					{tx.Interaction.ID, chatrelay.Answer{Value: strings.Repeat("x", chatrelay.LimitAnswerValue.Max+1)}},
					{tx.Interaction.ID, chatrelay.Answer{Value: "  "}},
				} {
					_, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: c.id, Answer: c.ans, By: chatrelay.Operator})
					assert.Code(t, err, chatrelay.InvalidAnswer)
				}
				_, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: "ix_000000000000", Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator})
				assert.Code(t, err, chatrelay.NotFound)
				e, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: tx.Interaction.ID, Answer: chatrelay.Answer{Value: "a branch of my own"}, By: chatrelay.Operator})
				assert.Success(t, err)
				assert.Equal(t, "free text taken", e.Interaction.State, chatrelay.Answered)
				p, err := b.Store.Changes(context.Background(), thA, tx.Rev, 0)
				assert.Success(t, err)
				assert.Equal(t, "only the good answer changed anything", len(p.Messages), 1)
			}},
			{"reactions: in order, idempotent, removable; bad emoji refused", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				m := appendText(t, b.Store, thA, "", "hello")
				react := func(op store.ChangeOp, emoji string, by chatrelay.Author) (store.Entry, error) {
					return change(b.Store, thA, store.Change{Op: op, MessageID: m.ID, Emoji: emoji, By: by})
				}
				e1, err := react(store.React, "👍", chatrelay.Hermes)
				assert.Success(t, err)
				e2, err := react(store.React, "👍", chatrelay.Operator)
				assert.Success(t, err)
				e3, err := react(store.React, "👍", chatrelay.Hermes)
				assert.Success(t, err)
				assert.Equal(t, "a reaction the reactor has: no new rev", e3.Rev, e2.Rev)
				assert.Equal(t, "reactors in order", e3.Reactions, chatrelay.Reactions{"👍": {chatrelay.Hermes, chatrelay.Operator}})
				e4, err := react(store.Unreact, "🎉", chatrelay.Hermes)
				assert.Success(t, err)
				assert.Equal(t, "removing one it has not: no new rev", e4.Rev, e2.Rev)
				e5, err := react(store.Unreact, "👍", chatrelay.Hermes)
				assert.Success(t, err)
				assert.True(t, e5.Rev > e2.Rev && e1.Rev > m.Epoch, "revs %d %d %d", m.Epoch, e1.Rev, e5.Rev)
				assert.Equal(t, "after removal", e5.Reactions, chatrelay.Reactions{"👍": {chatrelay.Operator}})
				e6, err := react(store.Unreact, "👍", chatrelay.Operator)
				assert.Success(t, err)
				assert.Equal(t, "no reactions left", e6.Reactions, chatrelay.Reactions(nil))
				assert.True(t, !bytes.Contains(e6.JSON2, []byte("reactions")), "an empty reactions field: %s", e6.JSON2)
				for _, bad := range []string{"", "a b", "\n", strings.Repeat("x", 65)} {
					_, err := react(store.React, bad, chatrelay.Hermes)
					assert.Code(t, err, chatrelay.InvalidEmoji)
				}
				_, err = change(b.Store, thA, store.Change{Op: store.React, MessageID: "MSG-20261023-184000-000000", Emoji: "👍", By: chatrelay.Hermes})
				assert.Code(t, err, chatrelay.NotFound)
				_, err = change(b.Store, thB, store.Change{Op: store.React, MessageID: m.ID, Emoji: "👍", By: chatrelay.Hermes})
				assert.Code(t, err, chatrelay.NotFound)
				assert.Equal(t, "threads", b.Threads(t), []string{thA})
			}},
			{"idempotent appends: a replay stores nothing; another message under the id is a conflict", Options{Retention: chatrelay.Retention{Messages: 2}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				first, err := b.Store.Append(ctx, thA, store.NewMessage{Text: "hello", ClientID: "tab-1:1"})
				assert.Success(t, err)
				assert.True(t, !first.Replayed, "a first post replayed")
				again, err := b.Another(t, Options{Now: clk.Now}).Store.Append(ctx, thA, store.NewMessage{Text: "hello", ClientID: "tab-1:1"})
				assert.Success(t, err)
				assert.True(t, again.Replayed && again.ID == first.ID && again.Epoch == first.Epoch, "replay %+v of %+v", again, first)
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Text: "hello, again", ClientID: "tab-1:1"})
				assert.Code(t, err, chatrelay.ClientIDConflict)
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Text: "hello", Author: chatrelay.Agent, ClientID: "tab-1:1"})
				assert.Code(t, err, chatrelay.ClientIDConflict)
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Text: "hello", ClientID: "bad id!"})
				assert.Code(t, err, chatrelay.InvalidClientID)
				assert.Equal(t, "stored", len(since(t, b.Store, thA, 0, 0).Messages), 1)
				assert.Equal(t, "the v2 object carries the client_id", bytes.Contains(first.JSON2, []byte(`"client_id":"tab-1:1"`)), true)
				appendText(t, b.Store, thA, "", "two")
				appendText(t, b.Store, thA, "", "three") // the first is no longer retained
				later, err := b.Store.Append(ctx, thA, store.NewMessage{Text: "hello", ClientID: "tab-1:1"})
				assert.Success(t, err)
				assert.True(t, !later.Replayed && later.ID != first.ID, "a client_id of a message retention dropped replayed")
			}},
			{"questions and cards: checked, rendered for v1, carried whole in v2", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				ix := ask(t, b.Store, thA, approval)
				assert.Equal(t, "author", ix.Author, chatrelay.Hermes)
				assert.True(t, strings.Contains(ix.Text, "Deploy build 412 to production?") && strings.Contains(ix.Text, "build: 412") && strings.Contains(ix.Text, "Approve or deny"),
					"v1 rendering %q", ix.Text)
				assert.Equal(t, "state", ix.Interaction.State, chatrelay.Pending)
				assert.True(t, chatrelay.InteractionIDPattern.MatchString(ix.Interaction.ID), "id %q", ix.Interaction.ID)
				card := &chatrelay.Card{Title: "Build 412", FallbackText: "Build 412 is green.", Blocks: []chatrelay.Block{
					{Type: chatrelay.TextBlock, Text: "<script>alert(1)</script> stays text"},
					{Type: chatrelay.LinkBlock, URL: "https://ci.example.com/412", Label: "log"}}}
				c, err := b.Store.Append(ctx, thA, store.NewMessage{Author: chatrelay.Hermes, Card: card, MustExist: true})
				assert.Success(t, err)
				assert.Equal(t, "card's v1 text", c.Text, "Build 412 is green.")
				assert.True(t, bytes.Contains(c.JSON2, []byte(`<script>alert(1)</script> stays text`)), "v2: %s", c.JSON2)
				bad := *card
				bad.Blocks = []chatrelay.Block{{Type: chatrelay.LinkBlock, URL: "javascript:alert(1)"}}
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Author: chatrelay.Hermes, Card: &bad, MustExist: true})
				assert.Code(t, err, chatrelay.InvalidCard)
				tooLong := approval
				tooLong.Title = strings.Repeat("t", chatrelay.LimitApprovalTitle.Max+1)
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Author: chatrelay.Hermes, Ask: &tooLong, MustExist: true})
				assert.Code(t, err, chatrelay.InvalidInteraction)
				_, err = b.Store.Append(ctx, thB, store.NewMessage{Author: chatrelay.Hermes, Ask: &input, MustExist: true})
				assert.Code(t, err, chatrelay.NotFound)
				assert.Equal(t, "stored", len(since(t, b.Store, thA, 0, 0).Messages), 3)
			}},
			{"the feed carries changes in their new state, once, in order (changes of one message between two reads may come as its latest state)", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				m := appendText(t, b.Store, thA, "", "hello")
				feed := follow(t, b.Store)
				other := b.Another(t, Options{Now: clk.Now}).Store
				seen := func(n int) {
					t.Helper()
					assert.Eventually(t, 10*time.Second, "the change on the feed", func() bool { return len(feed.messages()) >= n })
				}
				r, err := change(other, thA, store.Change{Op: store.React, MessageID: m.ID, Emoji: "👀", By: chatrelay.Hermes})
				assert.Success(t, err)
				seen(1)
				ix := ask(t, other, thA, input)
				seen(2)
				ans, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator})
				assert.Success(t, err)
				seen(3)
				feed.stop(t)
				got := feed.messages()
				assert.Equal(t, "changes", len(got), 3)
				assert.True(t, got[0].Rev == r.Rev && got[0].Rev > got[0].Epoch && string(got[0].JSON2) == string(r.JSON2), "first: %s", got[0].JSON2)
				assert.True(t, got[1].Rev == got[1].Epoch && got[1].ID == ix.ID, "second: %s", got[1].JSON2)
				assert.True(t, got[2].Rev == ans.Rev && got[2].Interaction.State == chatrelay.Answered, "third: %s", got[2].JSON2)
			}},
			{"a change dropped by retention tells a v2 cursor before it to reset", Options{Retention: chatrelay.Retention{Messages: 2}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				m1 := appendText(t, b.Store, thA, "", "one")
				appendText(t, b.Store, thA, "", "two")
				r, err := change(b.Store, thA, store.Change{Op: store.React, MessageID: m1.ID, Emoji: "👍", By: chatrelay.Operator})
				assert.Success(t, err)
				appendText(t, b.Store, thA, "", "three") // drops m1, changed at r.Rev
				p, err := b.Store.Changes(context.Background(), thA, r.Rev-1, 0)
				assert.Success(t, err)
				assert.Equal(t, "reset", p.Reset, true)
				p, err = b.Store.Changes(context.Background(), thA, r.Rev, 0)
				assert.Success(t, err)
				assert.Equal(t, "no reset after the change", p.Reset, false)
			}},
			{"the sweep removes a thread whose messages all expired at once, and the thread made again starts above its newest change", Options{Retention: chatrelay.Retention{Age: time.Hour}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				m1 := appendText(t, b.Store, thA, "", "old")
				// A node whose clock is ahead reacts to it: the thread's
				// newest change is in this node's future.
				clk.Set(t0.Add(90 * time.Minute))
				r, err := change(b.Store, thA, store.Change{Op: store.React, MessageID: m1.ID, Emoji: "👍", By: chatrelay.Operator})
				assert.Success(t, err)
				clk.Set(t0.Add(70 * time.Minute)) // m1 is past the hour here
				st, err := b.Store.Sweep(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "threads removed with a change ahead", st.ThreadsRemoved, 1)
				assert.Equal(t, "an expired message served after the sweep", len(since(t, b.Store, thA, 0, 0).Messages), 0)
				assert.Equal(t, "threads", b.Threads(t), []string(nil))
				m2 := appendText(t, b.Store, thA, "", "new")
				p, err := b.Store.Changes(context.Background(), thA, r.Rev, 0)
				assert.Success(t, err)
				assert.True(t, len(p.Messages) == 1 && p.Messages[0].ID == m2.ID, "after the change's cursor: %+v", p.Messages)
				// A reaction to an expired message keeps nothing: swept at
				// the very millisecond of the change, the thread goes, and
				// the next message still comes after it.
				clk.Set(t0.Add(3 * time.Hour))
				r, err = change(b.Store, thA, store.Change{Op: store.React, MessageID: m2.ID, Emoji: "👍", By: chatrelay.Operator})
				assert.Success(t, err)
				clk.Set(time.UnixMilli(r.Rev))
				st, err = b.Store.Sweep(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "threads removed at the change's millisecond", st.ThreadsRemoved, 1)
				assert.Equal(t, "an expired message served after the sweep", len(since(t, b.Store, thA, 0, 0).Messages), 0)
				m3 := appendText(t, b.Store, thA, "", "newer")
				p, err = b.Store.Changes(context.Background(), thA, r.Rev, 0)
				assert.Success(t, err)
				assert.True(t, len(p.Messages) == 1 && p.Messages[0].ID == m3.ID, "after the second change's cursor: %+v", p.Messages)
				// What the removal keeps of the thread (its newest change)
				// lasts RemoveAfter past that change, no longer.
				clk.Set(time.UnixMilli(m3.Epoch).Add(time.Hour + time.Millisecond))
				r, err = change(b.Store, thA, store.Change{Op: store.React, MessageID: m3.ID, Emoji: "👍", By: chatrelay.Operator})
				assert.Success(t, err)
				st, err = b.Store.Sweep(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)
				assertRemovalFades(t, b, clk, thA, r.Rev)
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clk := testclock.New(t0)
				tc.opt.Now = clk.Now
				tc.run(t, Open(t, backend, tc.opt), clk)
			})
		}
	})
}

// assertRemovalFades checks that the sweep's removal of thread, whose
// newest change was at newest, leaves nothing of it once RemoveAfter has
// passed that change: on the file store no file of the thread after the
// next sweep; on Redis no key of the thread that outlives it.
func assertRemovalFades(t *testing.T, b *Backend, clk *testclock.Clock, thread string, newest int64) {
	t.Helper()
	switch b.Name {
	case File, FileAppendLog:
		clk.Set(time.UnixMilli(newest).Add(chatrelay.RemoveAfter + time.Millisecond))
		_, err := b.Store.Sweep(context.Background())
		assert.Success(t, err)
		for f := range Files(t, b.Dir) {
			if strings.Contains(f, thread) {
				t.Errorf("%s left behind by the removal of %s", f, thread)
			}
		}
	default:
		ctx := context.Background()
		c := b.ThreadClient(t, thread)
		for _, k := range threadKeysMatching(t, b, thread, b.KeyPrefix(thread)+"{"+thread+"}*") {
			ttl, err := c.PTTL(ctx, k).Result()
			assert.Success(t, err)
			if ttl <= 0 || ttl > chatrelay.RemoveAfter {
				t.Errorf("%s left behind by the removal of %s, for %v", k, thread, ttl)
			}
		}
	}
}
