package transport_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/samekey"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// heldAppend is a store whose first Append of a message with client_id
// cid waits for release, saying on entered that it began: a first post
// still being stored (a slow disk, a Redis round trip) while its repeat
// arrives. As a wrapper it takes the two-call path (the rate window's
// Take, then Append), which is every post's on the file store and, on
// Redis, a participant's post or one with attachments.
type heldAppend struct {
	store.Store
	cid              string
	once             sync.Once
	entered, release chan struct{}
}

func (h *heldAppend) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	if m.ClientID == h.cid {
		h.once.Do(func() {
			close(h.entered)
			<-h.release
		})
	}
	return h.Store.Append(ctx, thread, m)
}

// TestARepeatBesideItsFirstIsAnsweredAsARepeat: a post repeated with its
// client_id while the first is still being stored is answered the first
// message's 201 again (Idempotent-Replayed: true), even when the first
// took the rate window's last place, never 429 rate_limited: a repeat
// counts in no window. An outside probe (probe14) sent one post 10 times
// at once with --rate-thread 3 and got 7 of them refused 429, with a
// Retry-After of the whole window, for a message that was stored.
func TestARepeatBesideItsFirstIsAnsweredAsARepeat(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		held := &heldAppend{cid: "tab-1:1", entered: make(chan struct{}), release: make(chan struct{})}
		repeats := new(samekey.Keys)
		e := startPush(t, pushOptions{backend: backend, windows: chatrelay.Windows{PerThread: 1, PerIP: 100},
			config: func(c *transport.Config) { held.Store = c.Store; c.Store = held; c.Repeats = repeats }})
		tok := tokenN(1)
		body := `{"text":"hello","client_id":"tab-1:1"}`
		type answer struct {
			status int
			hdr    http.Header
			body   []byte
		}
		first, repeat := make(chan answer, 1), make(chan answer, 1)
		go func() {
			s, h, b := e.do(http.MethodPost, "/api/chat/post", tok, body, nil)
			first <- answer{s, h, b}
		}()
		select {
		case <-held.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first post did not reach the store within 10 s")
		}
		go func() {
			s, h, b := e.do(http.MethodPost, "/api/chat/post", tok, body, nil)
			repeat <- answer{s, h, b}
		}()
		// The repeat is answered while the first is held (the refusal this
		// test is about), or waits for its first's key to be let go.
		var r answer
		answered := false
		assert.Eventually(t, 10*time.Second, "the repeat answered, or waiting for its first", func() bool {
			select {
			case r = <-repeat:
				answered = true
				return true
			default:
				return repeats.Waiting(samekey.Key{chatrelay.ThreadOf(tok), "tab-1:1"}) == 1
			}
		})
		close(held.release)
		if !answered {
			select {
			case r = <-repeat:
			case <-time.After(10 * time.Second):
				t.Fatal("the repeat was not answered within 10 s of its first's release")
			}
		}
		f := <-first
		assert.Equal(t, "the first post: "+string(f.body), f.status, http.StatusCreated)
		assert.Equal(t, "the repeat: "+string(r.body), r.status, http.StatusCreated)
		assert.Equal(t, "the repeat's body is the first's", string(r.body), string(f.body))
		assert.Equal(t, "the repeat's header", r.hdr.Get("Idempotent-Replayed"), "true")
		assert.Equal(t, "messages stored", len(e.poll(tok, 0).Messages), 1)
	})
}
