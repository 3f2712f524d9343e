package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// TestConformanceDroppedInteractionClosed: an interaction retention drops
// while pending is announced on the feed, once, closed expired
// (Batch.Closed): dropped by another process's append past the message
// limit, and by the sweep with its thread; one answered before the drop
// is none. No stream cursor moves: it is in no batch's Messages.
func TestConformanceDroppedInteractionClosed(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		clk := testclock.New(t0)
		opt := Options{Now: clk.Now, Retention: chatrelay.Retention{Messages: 2, Age: time.Hour}}
		b := Open(t, backend, opt)
		ctx := context.Background()
		feed := follow(t, b.Store)
		closed := func(thread string) []store.Entry { // what the feed said closed
			var out []store.Entry
			for _, bt := range feed.batches() {
				if bt.Thread == thread {
					out = append(out, bt.Closed...)
				}
			}
			return out
		}
		appendText(t, b.Store, thA, "", "hello")
		ixA := ask(t, b.Store, thA, approval)
		appendText(t, b.Store, thB, "", "hello")
		ixB := ask(t, b.Store, thB, approval)
		other := b.Another(t, opt).Store // the host CLI, or another node
		for _, text := range []string{"one", "two"} {
			_, err := other.Append(ctx, thA, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
			assert.Success(t, err)
		}
		heard := func(thread string) bool { return len(closed(thread)) > 0 }
		assert.Eventually(t, 10*time.Second, "the drop on the feed", func() bool { return heard(thA) })
		// One answered before retention drops it is no drop of a pending
		// interaction: nothing in Closed (its answer was its closing).
		appendText(t, b.Store, thC, "", "hello")
		ixC := ask(t, b.Store, thC, approval)
		_, err := change(b.Store, thC, store.Change{Op: store.Respond, InteractionID: ixC.Interaction.ID, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
		assert.Success(t, err)
		var last store.Entry
		for _, text := range []string{"one", "two"} {
			last, err = other.Append(ctx, thC, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
			assert.Success(t, err)
		}
		assert.Eventually(t, 10*time.Second, "the appends on the feed", func() bool {
			return slices.ContainsFunc(feed.messages(), func(e store.Entry) bool { return e.ID == last.ID })
		})
		clk.Set(t0.Add(2 * time.Hour))
		st, err := b.Store.Sweep(ctx)
		assert.Success(t, err)
		assert.Equal(t, "threads removed", st.ThreadsRemoved, 3)
		assert.Eventually(t, 10*time.Second, "the removal's drop on the feed", func() bool { return heard(thB) })
		feed.stop(t)
		assert.Equal(t, "closed in a thread whose question was answered", len(closed(thC)), 0)
		for thread, ix := range map[string]store.Entry{thA: ixA, thB: ixB} {
			assert.Equal(t, "closed in "+thread, len(closed(thread)), 1)
			c := closed(thread)[0]
			assert.Equal(t, "its message", c.ID, ix.ID)
			assert.Equal(t, "its state", c.Interaction.State, chatrelay.Expired)
			assert.True(t, c.Rev > ix.Rev && c.Interaction.AnsweredAt > 0, "rev %d, answered_at %d", c.Rev, c.Interaction.AnsweredAt)
		}
		for _, e := range feed.messages() {
			assert.True(t, e.Interaction == nil || e.Interaction.State != chatrelay.Expired, "a drop in Messages: %s", e.JSON2)
		}
	})
}
