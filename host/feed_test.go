package host_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// countingFeeds is a store that counts the change feeds started on it
// and those running.
type countingFeeds struct {
	store.Store
	started, running atomic.Int32
}

func (c *countingFeeds) Follow(ctx context.Context, fn func(store.Batch)) error {
	c.started.Add(1)
	c.running.Add(1)
	defer c.running.Add(-1)
	return c.Store.Follow(ctx, fn)
}

// TestWaitsShareOneFeed: the verbs' waits running together (two
// wait_interaction, one wait_messages) follow one change feed of the
// store, not one each, and each ends with its own outcome; once the last
// ends, no feed runs.
func TestWaitsShareOneFeed(t *testing.T) {
	b := storetest.Open(t, storetest.File, storetest.Options{})
	st := &countingFeeds{Store: b.Store}
	v := &host.Verbs{Store: st}
	ctx := t.Context()
	_, err := st.Append(ctx, thread, store.NewMessage{Text: "deploy?"})
	assert.Success(t, err)
	var ids []string
	for range 2 {
		asked, err := v.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Timeout: 3600})
		assert.Success(t, err)
		ids = append(ids, asked.Interaction.ID)
	}
	waitIx := func(id string) <-chan readResult {
		got := make(chan readResult, 1)
		go func() {
			r, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: id, Timeout: 60})
			got <- readResult{r, err}
		}()
		return got
	}
	first := waitIx(ids[0])
	assert.Eventually(t, within, "the first wait to start the feed", func() bool { return st.running.Load() == 1 })
	second := waitIx(ids[1])
	messages := make(chan error, 1)
	go func() {
		r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: thread, Since: 1, Timeout: 60})
		if err == nil && r.TimedOut {
			err = context.DeadlineExceeded
		}
		messages <- err
	}()
	answer := func(id string) {
		_, err := st.Change(ctx, thread, store.Change{Op: store.Respond, InteractionID: id, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
		assert.Success(t, err)
	}
	answer(ids[1])
	rr := recv(t, second, "the second wait")
	assert.Success(t, rr.err)
	assert.Equal(t, "the second wait's outcome", rr.r.Interaction.State, chatrelay.Approved)
	assert.Success(t, recv(t, messages, "wait_messages"))
	answer(ids[0])
	rr = recv(t, first, "the first wait")
	assert.Success(t, rr.err)
	assert.Equal(t, "the first wait's outcome", rr.r.Interaction.State, chatrelay.Approved)
	assert.Equal(t, "change feeds started", st.started.Load(), int32(1))
	assert.Eventually(t, time.Second, "the feed to stop with its last wait", func() bool { return st.running.Load() == 0 })
}
