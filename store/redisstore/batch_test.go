package redisstore

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// TestBatchedScriptsKeepTheirAnswers: scripts sent together answer each
// their own caller. 64 posts at once, every other one refused (MustExist on
// a thread that does not exist), each with its own text, over two nodes:
// each caller gets its own message or its own refusal, and every thread
// holds only its own.
func TestBatchedScriptsKeepTheirAnswers(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	nodes := []*Store{openStore(t, srv, Options{}), openStore(t, srv, Options{})}
	ctx := t.Context()
	const n = 64
	var wg sync.WaitGroup
	errs := make([]error, n)
	entries := make([]store.Entry, n)
	for i := range n {
		wg.Go(func() {
			entries[i], errs[i] = nodes[i%2].Append(ctx, fmt.Sprintf("%016x", i), store.NewMessage{
				Text: fmt.Sprintf("post %d", i), MustExist: i%2 == 1,
			})
		})
	}
	wg.Wait()
	for i := range n {
		if i%2 == 1 {
			wantCode(t, errs[i], chatrelay.NotFound)
			continue
		}
		if errs[i] != nil || entries[i].Text != fmt.Sprintf("post %d", i) {
			t.Fatalf("post %d: %+v, %v", i, entries[i], errs[i])
		}
		p := must[store.Page](t)(nodes[0].Since(ctx, fmt.Sprintf("%016x", i), 0, 0))
		if len(p.Messages) != 1 || p.Messages[0].ID != entries[i].ID {
			t.Fatalf("thread %d holds %+v", i, p.Messages)
		}
	}
}

// TestScriptsAfterRedisForgotThem: after Redis lost its scripts and
// functions (a restart, here SCRIPT FLUSH and FUNCTION FLUSH), batched
// posts and rate windows still run: a batch's script or function that
// Redis no longer has is sent again, loaded; as functions (the library,
// functions.go) and as scripts (evalOnly: a Redis without functions).
func TestScriptsAfterRedisForgotThem(t *testing.T) {
	t.Parallel()
	for _, call := range []string{"fcall", "evalsha"} {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			scriptsAfterRedisForgotThem(t, call == "evalsha")
		})
	}
}

func scriptsAfterRedisForgotThem(t *testing.T, evalOnly bool) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{evalOnly: evalOnly})
	forget := func() {
		t.Helper()
		if err := s.rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.FunctionFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rl := NewRateLimiter(s, chatrelay.Windows{PerThread: 1000, PerIP: 1000, Window: time.Minute})
	ctx := t.Context()
	// One batch of three appends, sent as Redis forgot the script.
	forget()
	batch := make([]*scriptCall, 3)
	for i := range batch {
		th := fmt.Sprintf("%016x", 100+i)
		stamp, ts := secondOf(time.UnixMilli(1792778400000))
		batch[i] = &scriptCall{script: appendScript, keys: s.appendKeys(th, false), done: make(chan *redis.Cmd, 1),
			args: []any{th, 1792778400000, s.appendSettings(nil), "1000 0 0 g", `"operator"`, `"x"`, stamp, ts, "aaaaaa"}}
	}
	s.sendBatch(batch)
	for i, c := range batch {
		// Stored: the message's JSON (appendScript).
		if res, err := (<-c.done).Text(); err != nil || !strings.HasPrefix(res, `{"id":"MSG-`) {
			t.Fatalf("batched append %d: %q, %v", i, res, err)
		}
	}
	// Posts and rate windows at once, as the senders batch them.
	for round := range 3 {
		forget()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 32 {
			wg.Go(func() {
				th := fmt.Sprintf("%016x", i)
				if _, err := rl.Take(ctx, th, "192.0.2.1"); err != nil {
					errs <- fmt.Errorf("take %d: %w", i, err)
				}
				if _, err := s.Append(ctx, th, store.NewMessage{Text: "x"}); err != nil {
					errs <- fmt.Errorf("append %d: %w", i, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestClosedStoreRefusesScripts: after Close, a post answers
// store_unavailable at once, and Close has stopped the senders (the race
// detector and the goroutine count of the test binary would see them).
func TestClosedStoreRefusesScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s, err := Open(t.Context(), srv.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	must[store.Entry](t)(s.Append(t.Context(), "a1b2c3d4e5f60718", store.NewMessage{Text: "x"}))
	s.Close()
	start := time.Now()
	_, err = s.Append(t.Context(), "a1b2c3d4e5f60718", store.NewMessage{Text: "x"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("answered after %v", took)
	}
}
