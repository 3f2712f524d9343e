package transport

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// panickyStore panics on a post whose text is "panic", as a store with a
// bug would.
type panickyStore struct{ store.Store }

func (s panickyStore) Append(ctx context.Context, thread string, m store.NewMessage) (store.Entry, error) {
	if m.Text == "panic" {
		panic("a store's bug")
	}
	return s.Store.Append(ctx, thread, m)
}

// TestAPostWhoseStorePanickedHoldsNoPlace: a post whose store call
// panicked (net/http recovers the handler) stored nothing and gives its
// place in the rate windows back, as a refused one does: the next post
// of a thread with a window of one is stored. Before, the place stayed
// held for ever: every later post of the thread was refused 429 with a
// Retry-After of 1 s, and its log was never pruned.
func TestAPostWhoseStorePanickedHoldsNoPlace(t *testing.T) {
	be := storetest.Open(t, storetest.File, storetest.Options{})
	srv := httptest.NewUnstartedServer(NewServer(Config{
		Store:   panickyStore{be.Store},
		Limiter: NewMemoryLimiter(chatrelay.Windows{PerThread: 1, PerIP: 100, Window: time.Hour}, nil),
		Log:     slog.New(slog.DiscardHandler),
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // net/http's report of the handler's panic: expected here
	srv.Start()
	t.Cleanup(srv.Close)
	post := func(text string) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+chatrelay.PathPost, strings.NewReader(`{"text":"`+text+`"}`))
		req.Header.Set("X-Chat-Token", strings.Repeat("ab", 32))
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	_, err := post("panic")
	assert.True(t, err != nil, "the post whose store panicked was answered")
	status, err := post("after the panic")
	assert.Success(t, err)
	assert.Equal(t, "the next post of the thread", status, http.StatusCreated)
}
