package redisstore

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPostIsOneScript: a post through the HTTP server on one Redis, with
// the Redis rate windows, is one script (one round trip): the rate
// windows, the append and the feed in one FCALL (one EVALSHA on a Redis
// without functions), for the post that creates its thread and for the
// next one; both are counted in the windows.
func TestPostIsOneScript(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	rl := NewRateLimiter(s, chatrelay.Windows{PerThread: 100, PerIP: 100, Window: time.Minute})
	hs := httptest.NewServer(transport.NewServer(transport.Config{Store: s, Limiter: rl, Log: slog.New(slog.DiscardHandler)}))
	t.Cleanup(hs.Close)
	const token = "00000000000000000000000000000000000000000000000000000000000000b7"
	thread := chatrelay.ThreadOf(token)
	post := func(token, text string) {
		t.Helper()
		req, _ := http.NewRequest("POST", hs.URL+chatrelay.PathPost, strings.NewReader(`{"text":"`+text+`"}`))
		req.Header.Set("X-Chat-Token", token)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("post %q: %s", text, resp.Status)
		}
	}
	post(strings.Repeat("c", 64), "loads the scripts") // into Redis's cache: the next posts run EVALSHA alone
	for i, what := range []string{"creates the thread", "to the thread"} {
		if err := s.rdb.ConfigResetStat(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		post(token, what)
		calls := commandCalls(t, s)
		if calls["fcall"]+calls["evalsha"] != 1 || calls["eval"] != 0 || calls["exec"] != 0 {
			t.Fatalf("the post that %s ran %v: want one script", what, calls)
		}
		if n := s.rdb.LLen(t.Context(), s.prefix+"{rl}:tl:"+thread).Val(); n != int64(i+1) {
			t.Fatalf("the thread's window holds %d posts after %d", n, i+1)
		}
	}
}

// TestAppendLimited: Take and Append in one script answer as the two
// calls did, on two nodes sharing the windows: the windows count both
// kinds of call; over a window the post is refused with the wait and
// leaves nothing; a replay of a stored client_id is answered even over a
// full window and counts nowhere; a refused creation (the thread limit)
// leaves no key and no count; a participant's post or one with
// attachments is left to the two calls.
func TestAppendLimited(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	a := openStore(t, srv, Options{Now: clk.Now, MaxThreads: 2})
	b := openStore(t, srv, Options{Now: clk.Now, MaxThreads: 2})
	w := chatrelay.Windows{PerThread: 3, PerIP: 5, Window: 10 * time.Minute}
	la, lb := onClock(NewRateLimiter(a, w), clk), onClock(NewRateLimiter(b, w), clk)
	ctx := t.Context()
	const th, ip = "a1b2c3d4e5f60718", "192.0.2.7"
	window := func(key string) int64 { return a.rdb.LLen(ctx, a.prefix+"{rl}:"+key).Val() }
	appendOn := func(s *Store, l *RateLimiter, thread string, m store.NewMessage) (store.Entry, error) {
		t.Helper()
		e, done, err := s.AppendLimited(ctx, l, thread, ip, m)
		if !done {
			t.Fatalf("AppendLimited of %+v on its own store's limiter did nothing", m)
		}
		return e, err
	}

	first := must[store.Entry](t)(appendOn(a, la, th, store.NewMessage{Text: "one", ClientID: "c1"}))
	clk.Advance(time.Minute)
	must[func(bool)](t)(lb.Take(ctx, th, ip)) // a Take of the other node counts in the same window
	must[store.Entry](t)(appendOn(b, lb, th, store.NewMessage{Text: "three"}))
	if window("tl:"+th) != 3 || window("il:"+ip) != 3 {
		t.Fatalf("windows hold %d and %d posts, want 3 and 3", window("tl:"+th), window("il:"+ip))
	}

	// The thread's window is full: refused with the wait, nothing stored.
	_, err := appendOn(a, la, th, store.NewMessage{Text: "four"})
	if he := wantCode(t, err, chatrelay.RateLimited); he.Retry != 9*time.Minute {
		t.Fatalf("retry %s, want 9m (the first post leaves the window then)", he.Retry)
	}
	if p := must[store.Page](t)(a.Since(ctx, th, 0, 0)); len(p.Messages) != 2 {
		t.Fatalf("the thread holds %d messages after a refused post, want 2", len(p.Messages))
	}
	_, err = la.Take(ctx, th, ip) // as a Take sees it
	wantCode(t, err, chatrelay.RateLimited)

	// A replay over the full window: the stored message, counted nowhere.
	e := must[store.Entry](t)(appendOn(b, lb, th, store.NewMessage{Text: "one", ClientID: "c1"}))
	if !e.Replayed || e.ID != first.ID {
		t.Fatalf("replay answered %+v, want the first message replayed", e)
	}
	_, err = appendOn(b, lb, th, store.NewMessage{Text: "other", ClientID: "c1"})
	wantCode(t, err, chatrelay.ClientIDConflict)
	if window("tl:"+th) != 3 || window("il:"+ip) != 3 {
		t.Fatalf("windows hold %d and %d posts after replays, want 3 and 3", window("tl:"+th), window("il:"+ip))
	}

	// The thread limit (2): the second thread is made, the third refused,
	// leaving no key and no count.
	must[store.Entry](t)(appendOn(a, la, "0000000000000002", store.NewMessage{Text: "two"}))
	_, err = appendOn(b, lb, "0000000000000003", store.NewMessage{Text: "three"})
	wantCode(t, err, chatrelay.ThreadLimit)
	if keys := a.rdb.Keys(ctx, "*0000000000000003*").Val(); len(keys) != 0 {
		t.Fatalf("a refused creation left %v", keys)
	}
	if window("il:"+ip) != 4 || window("tl:0000000000000002") != 1 {
		t.Fatalf("the address's window holds %d posts, want 4 (the refused creation not counted)", window("il:"+ip))
	}

	// Not on this store's limiter, a participant's post, attachments: the
	// two calls.
	for _, c := range []struct {
		s *Store
		l chatrelay.RateLimiter
		m store.NewMessage
	}{
		{a, lb, store.NewMessage{Text: "x"}},
		{a, transport.NewMemoryLimiter(w, clk.Now), store.NewMessage{Text: "x"}},
		{a, la, store.NewMessage{Text: "x", Participant: "p1"}},
		{a, la, store.NewMessage{Text: "x", Attachments: []string{"a1"}}},
	} {
		if _, done, err := c.s.AppendLimited(ctx, c.l, th, ip, c.m); done || err != nil {
			t.Fatalf("AppendLimited(%T, %+v) = done %v, %v; want left to the two calls", c.l, c.m, done, err)
		}
	}
}

// TestAppendLimitedThreadLimitExact: creating posts through AppendLimited
// on two nodes at once create exactly MaxThreads threads; the refused
// ones leave no key and count in no window.
func TestAppendLimitedThreadLimitExact(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	w := chatrelay.Windows{PerThread: 100, PerIP: 1000, Window: time.Minute}
	a := openStore(t, srv, Options{MaxThreads: 7})
	b := openStore(t, srv, Options{MaxThreads: 7})
	nodes := []struct {
		s *Store
		l *RateLimiter
	}{{a, NewRateLimiter(a, w)}, {b, NewRateLimiter(b, w)}}
	ctx := t.Context()
	var mu sync.Mutex
	var created, refused []string
	var wg sync.WaitGroup
	for i := range 40 {
		n := nodes[i%2]
		th := fmt.Sprintf("%016x", 0xabc000+i)
		wg.Go(func() {
			_, done, err := n.s.AppendLimited(ctx, n.l, th, "192.0.2.9", store.NewMessage{Text: "first"})
			mu.Lock()
			defer mu.Unlock()
			switch code := chatrelay.CodeOf(err); {
			case !done:
				t.Errorf("AppendLimited did nothing")
			case code == "":
				created = append(created, th)
			case code == chatrelay.ThreadLimit:
				refused = append(refused, th)
			default:
				t.Errorf("append: %v", err)
			}
		})
	}
	wg.Wait()
	if len(created) != 7 || len(refused) != 33 {
		t.Fatalf("created %d threads, %d refused; want 7 and 33", len(created), len(refused))
	}
	if n := a.rdb.ZCard(ctx, a.index).Val(); n != 7 {
		t.Fatalf("the index holds %d threads, want 7", n)
	}
	for _, th := range refused {
		if keys := a.rdb.Keys(ctx, "*"+th+"*").Val(); len(keys) != 0 {
			t.Fatalf("refused creation of %s left %v", th, keys)
		}
	}
	if n := a.rdb.LLen(ctx, a.prefix+"{rl}:il:192.0.2.9").Val(); n != 7 {
		t.Fatalf("the address's window holds %d posts, want the 7 stored", n)
	}
}
