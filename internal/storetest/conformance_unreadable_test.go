package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// TestConformanceUnreadableThread: a thread whose stored messages do not
// parse (contract: 503 thread_unreadable, "it is never overwritten") is
// refused for writes as for reads, on every store: a post (the owner's,
// hermes's, a participant's), an invite, an answer, a reaction, a push
// subscription and an upload answer ThreadUnreadable and store nothing;
// reads stay refused; other threads keep working, and a revoke (taking
// access away) still works there.
func TestConformanceUnreadableThread(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		clk := testclock.New(t0)
		b := Open(t, backend, Options{Now: clk.Now})
		ctx := context.Background()
		m1 := appendText(t, b.Store, thA, "", "hello")
		ix := ask(t, b.Store, thA, approval)
		p := participants(t, b)
		g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
		appendText(t, b.Store, thB, "", "another thread")
		clk.Advance(time.Second)

		raw := b.CorruptThread(t, thA)
		_, err := b.Store.Since(ctx, thA, 0, 0)
		assert.Code(t, err, chatrelay.ThreadUnreadable)
		_, err = b.Store.Changes(ctx, thA, 0, 0)
		assert.Code(t, err, chatrelay.ThreadUnreadable)
		before := raw()

		writes := []struct {
			name string
			do   func() error
		}{
			{"the owner's post", func() error {
				_, err := b.Store.Append(ctx, thA, store.NewMessage{Text: "lost"})
				return err
			}},
			{"hermes's post", func() error {
				_, err := b.Store.Append(ctx, thA, store.NewMessage{Author: chatrelay.Hermes, Text: "lost", MustExist: true, ClientID: "c-1"})
				return err
			}},
			{"a participant's post", func() error {
				_, err := b.Store.Append(ctx, thA, store.NewMessage{Author: g.Author(), Text: "lost", Participant: g.ID})
				return err
			}},
			{"an ask", func() error {
				_, err := b.Store.Append(ctx, thA, store.NewMessage{Author: chatrelay.Hermes, Ask: &input, MustExist: true})
				return err
			}},
			{"an invite", func() error {
				g2, _ := chatrelay.Invite{Name: "Bo", Role: chatrelay.Viewer, Kind: chatrelay.Human, ExpiresIn: time.Hour, Cap: 1}.Grant(clk.Now())
				return p.Invite(ctx, thA, g2)
			}},
			{"a device", func() error {
				_, _, err := makeDevice(t, b, clk, thA, "Phone")
				return err
			}},
			{"an answer", func() error {
				_, err := change(b.Store, thA, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
				return err
			}},
			{"a reaction", func() error {
				_, err := change(b.Store, thA, store.Change{Op: store.React, MessageID: m1.ID, Emoji: "👍", By: chatrelay.Operator})
				return err
			}},
			{"an expiry", func() error {
				_, err := change(b.Store, thA, store.Change{Op: store.Expire, InteractionID: ix.Interaction.ID})
				return err
			}},
			{"a push subscription", func() error {
				_, _, err := pushOf(t, b).PushSubscribe(ctx, thA, pushSub(1, chatrelay.SubscriberOwner))
				return err
			}},
			{"an upload", func() error {
				_, err := upload(b.Store, thA, "notes.txt", []byte("some bytes"))
				return err
			}},
		}
		for _, w := range writes {
			err := w.do()
			assert.True(t, chatrelay.CodeOf(err) == chatrelay.ThreadUnreadable, "%s: got %v, want thread_unreadable", w.name, err)
			after := raw()
			assert.True(t, after == before, "%s changed the thread's stored data:\n%s\nwas\n%s", w.name, after, before)
		}
		_, err = b.Store.Since(ctx, thA, 0, 0)
		assert.Code(t, err, chatrelay.ThreadUnreadable)
		_, err = b.Store.Changes(ctx, thA, ix.Epoch, 0)
		assert.Code(t, err, chatrelay.ThreadUnreadable)
		_, err = b.Another(t, Options{Now: clk.Now}).Store.Since(ctx, thA, ix.Epoch, 0)
		assert.Code(t, err, chatrelay.ThreadUnreadable)

		appendText(t, b.Store, thB, "", "still working")
		assert.Equal(t, "threads listed", b.Threads(t), []string{thB})
		r, err := p.Revoke(ctx, thA, g.ID)
		assert.Success(t, err)
		assert.True(t, r.RevokedAt != 0, "the revoke of a grant of an unreadable thread was not stored")
	})
}

// TestConformanceThreadsReportUnreadable: a list for a person (chatrelay
// list) names a thread whose data does not parse, with its code, and lists
// the others, on every store (Threads leaves it out without a word).
func TestConformanceThreadsReportUnreadable(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		b := Open(t, backend, Options{})
		ctx := context.Background()
		appendText(t, b.Store, thA, "", "hello")
		appendText(t, b.Store, thB, "", "another thread")
		b.CorruptThread(t, thA)
		for range 2 { // the second: the thread is marked (Redis), or its snapshot cached (files)
			infos, bad, err := store.ThreadsOf(ctx, b.Store)
			assert.Success(t, err)
			assert.Equal(t, "threads listed", len(infos), 1)
			assert.Equal(t, "the readable thread", infos[0].Thread, thB)
			assert.Equal(t, "threads named", len(bad), 1)
			assert.Equal(t, "the unreadable thread", bad[0].Thread, thA)
			assert.Code(t, bad[0].Err, chatrelay.ThreadUnreadable)
		}
	})
}

// TestConformanceUnreadablePush: a thread whose push subscriptions record
// does not parse (a newer chatrelay's, after a rollback, or a hand edit)
// is refused as thread_unreadable (503, "kept as it is"), never as a 500
// internal error, and nothing writes over the record; the thread's
// messages stay readable and writable.
func TestConformanceUnreadablePush(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		b := Open(t, backend, Options{})
		ctx := context.Background()
		appendText(t, b.Store, thA, "", "hello")
		p := pushOf(t, b)
		sub, _, err := p.PushSubscribe(ctx, thA, pushSub(1, chatrelay.SubscriberOwner))
		assert.Success(t, err)

		raw := b.CorruptPush(t, thA)
		before := raw()
		_, err = p.PushSubscriptions(ctx, thA)
		assert.Code(t, err, chatrelay.ThreadUnreadable)
		_, _, err = p.PushSubscribe(ctx, thA, pushSub(2, chatrelay.SubscriberOwner))
		assert.Code(t, err, chatrelay.ThreadUnreadable)
		_, err = p.PushUnsubscribe(ctx, thA, sub.ID)
		assert.Code(t, err, chatrelay.ThreadUnreadable)
		assert.True(t, raw() == before, "a push write changed the thread's stored data:\n%s\nwas\n%s", raw(), before)
		appendText(t, b.Store, thA, "", "still working")
	})
}
