package host_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestOpenThreadClientID: open_thread with a client_id whose answer was
// lost, called again with it, answers the same thread and the same claim
// link, and makes nothing new: one thread in the store, one first message
// (replayed says so). Before, each call made a thread of its own with a
// fresh token, and the first one's link was lost for good (an outside
// probe: 20 calls whose answers were dropped made 18 orphan threads).
func TestOpenThreadClientID(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		ctx := t.Context()
		b := storetest.Open(t, backend, storetest.Options{})
		v := &host.Verbs{Store: b.Store, PublicURL: "https://chat.example.com"}
		in := host.OpenThreadInput{Title: "Deploy 412", Text: "Shall I deploy build 412?", ClientID: "deploy-412"}
		first, err := v.OpenThread(ctx, in) // its answer dropped on the way
		assert.Success(t, err)
		assert.True(t, !first.Replayed, "the first call says replayed")
		// A retry, by another process (the host CLI run again).
		again, err := (&host.Verbs{Store: b.Another(t, storetest.Options{}).Store, PublicURL: "https://chat.example.com"}).OpenThread(ctx, in)
		assert.Success(t, err)
		assert.Equal(t, "the thread", again.Thread, first.Thread)
		assert.Equal(t, "the link", again.Link, first.Link)
		assert.True(t, again.Replayed, "the retry does not say replayed")
		token := strings.TrimPrefix(first.Link, "https://chat.example.com/#t=")
		assert.True(t, chatrelay.ValidToken(token), "the link %q holds no token", first.Link)
		assert.Equal(t, "the thread is the token's", first.Thread, chatrelay.ThreadOf(token))
		assert.Equal(t, "threads", b.Threads(t), []string{first.Thread})
		p, err := b.Store.Changes(ctx, first.Thread, 0, 0)
		assert.Success(t, err)
		assert.Equal(t, "first messages", len(p.Messages), 1)
		assert.Equal(t, "title", p.Title, in.Title)
		js, err := json.Marshal(again)
		assert.Success(t, err)
		schematest.Valid(t, "open_thread.result", js)

		// Without a client_id nothing changes: a new thread each time.
		plain, err := v.OpenThread(ctx, host.OpenThreadInput{Text: in.Text, Title: in.Title})
		assert.Success(t, err)
		assert.True(t, plain.Thread != first.Thread, "a call without a client_id answered the thread of one with it")
		assert.Equal(t, "threads", len(b.Threads(t)), 2)
	})
}

// TestOpenThreadClientIDPerCaller: the same client_id from two agent keys
// (MCP over HTTP) and from the host (CLI, stdio MCP) names three threads:
// one caller never learns another's link by guessing its client_id.
func TestOpenThreadClientIDPerCaller(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		ctx := t.Context()
		b := storetest.Open(t, backend, storetest.Options{})
		v := &host.Verbs{Store: b.Store}
		in := host.OpenThreadInput{Text: "hello", ClientID: "job-1"}
		seen := map[string]string{}
		for _, c := range []struct {
			who string
			v   *host.Verbs
		}{
			{"the host", v},
			{"agent one", v.ForAgent(chatrelay.AgentKey{ID: "a_00000001", Name: "bot", Digest: strings.Repeat("1", 64)})},
			{"agent two", v.ForAgent(chatrelay.AgentKey{ID: "a_00000002", Name: "bot", Digest: strings.Repeat("2", 64)})},
		} {
			r, err := c.v.OpenThread(ctx, in)
			assert.Success(t, err)
			assert.True(t, !r.Replayed, "%s's open_thread answered as a repeat of %s's", c.who, seen[r.Thread])
			assert.True(t, seen[r.Thread] == "", "%s got the thread of %s", c.who, seen[r.Thread])
			seen[r.Thread] = c.who
			r2, err := c.v.OpenThread(ctx, in)
			assert.Success(t, err)
			assert.True(t, r2.Replayed && r2.Link == r.Link, "%s's retry: %+v, first %+v", c.who, r2, r)
		}
		assert.Equal(t, "threads", len(b.Threads(t)), 3)
	})
}

// TestOpenThreadClientIDConflict: a repeat of a client_id with another
// text or another title is refused client_id_conflict, as a post's is,
// and stores nothing.
func TestOpenThreadClientIDConflict(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		ctx := t.Context()
		b := storetest.Open(t, backend, storetest.Options{})
		v := &host.Verbs{Store: b.Store}
		first, err := v.OpenThread(ctx, host.OpenThreadInput{Title: "Deploy", Text: "Shall I deploy?", ClientID: "x"})
		assert.Success(t, err)
		_, err = v.OpenThread(ctx, host.OpenThreadInput{Title: "Deploy", Text: "Shall I roll back?", ClientID: "x"})
		assert.Code(t, err, chatrelay.ClientIDConflict)
		_, err = v.OpenThread(ctx, host.OpenThreadInput{Title: "Roll back", Text: "Shall I deploy?", ClientID: "x"})
		assert.Code(t, err, chatrelay.ClientIDConflict)
		_, err = v.OpenThread(ctx, host.OpenThreadInput{Text: "Shall I deploy?", ClientID: "bad client id"})
		assert.Code(t, err, chatrelay.InvalidClientID)
		p, err := b.Store.Changes(ctx, first.Thread, 0, 0)
		assert.Success(t, err)
		assert.Equal(t, "messages", len(p.Messages), 1)
		assert.Equal(t, "title", p.Title, "Deploy")
		assert.Equal(t, "threads", b.Threads(t), []string{first.Thread})
	})
}

// TestOpenThreadClientIDConcurrentFirstUse: the store's secret is made
// once when several processes (here stores of their own on the same
// folder or Redis prefix) need it at once: every one of their calls with
// the same client_id answers the one link, and the store holds one thread
// with one message.
func TestOpenThreadClientIDConcurrentFirstUse(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		ctx := t.Context()
		b := storetest.Open(t, backend, storetest.Options{})
		const n = 8
		verbs := make([]*host.Verbs, n)
		for i := range verbs {
			verbs[i] = &host.Verbs{Store: b.Another(t, storetest.Options{}).Store}
		}
		links := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, v := range verbs {
			wg.Go(func() {
				r, err := v.OpenThread(ctx, host.OpenThreadInput{Text: "hello", ClientID: "once"})
				links[i], errs[i] = r.Link, err
			})
		}
		wg.Wait()
		for i := range n {
			assert.Success(t, errs[i])
			assert.Equal(t, "the link", links[i], links[0])
		}
		threads := b.Threads(t)
		assert.Equal(t, "threads", len(threads), 1)
		p, err := b.Store.Changes(ctx, threads[0], 0, 0)
		assert.Success(t, err)
		assert.Equal(t, "messages", len(p.Messages), 1)
	})
}
