package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// TestSinceAfterLostData: Redis restarts without its data under a running
// node. A cursor into the lost data answers Reset, on every node, once a
// node that saw the data noticed; a cursor of the new data, or one past
// every message, does not.
func TestSinceAfterLostData(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	ctx := t.Context()
	const th, quiet = "1111222233334444", "5555666677778888"
	e1 := must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "one"}))
	e2 := must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "two"}))
	if p := must[store.Page](t)(a.Since(ctx, th, e1.Epoch, 0)); p.Reset || len(p.Messages) != 1 {
		t.Fatalf("before the loss: %+v", p)
	}
	if p := must[store.Page](t)(a.Since(ctx, th, e2.Epoch+5, 0)); p.Reset || len(p.Messages) != 0 || p.Cursor != e2.Epoch {
		t.Fatalf("a cursor past the newest message, before the loss: %+v", p)
	}

	srv.Restart(t) // no persistence: every key is gone
	// A node started after the loss never saw the old data: it cannot
	// tell, until a node that saw it has looked.
	late := openStore(t, srv, Options{})
	if p := must[store.Page](t)(late.Since(ctx, th, e2.Epoch, 0)); p.Reset || p.Cursor != 0 {
		t.Fatalf("on a node that never saw the data, before the others looked: %+v", p)
	}
	for _, since := range []int64{e2.Epoch, e1.Epoch, 1} {
		if p := must[store.Page](t)(a.Since(ctx, th, since, 0)); !p.Reset || p.Cursor != 0 || len(p.Messages) != 0 {
			t.Fatalf("since %d on the node that saw the data: %+v, want Reset", since, p)
		}
	}
	// The loss is recorded in Redis: every node answers the same now, in
	// both views.
	if p := must[store.Page](t)(late.Since(ctx, th, e2.Epoch, 0)); !p.Reset {
		t.Fatalf("on the late node after the loss was recorded: %+v, want Reset", p)
	}
	for _, node := range []*Store{a, late} {
		if p := must[store.Page](t)(node.Changes(ctx, th, e2.Epoch, 0)); !p.Reset || p.Cursor != 0 {
			t.Fatalf("v2 view after the loss: %+v, want Reset", p)
		}
	}

	// New messages: a cursor of the old data gets Reset and them; a cursor
	// of the new data, or past everything, gets no Reset.
	e3 := must[store.Entry](t)(late.Append(ctx, th, store.NewMessage{Text: "after the loss"}))
	if p := must[store.Page](t)(a.Since(ctx, th, e2.Epoch, 0)); !p.Reset || len(p.Messages) != 1 || p.Messages[0].ID != e3.ID {
		t.Fatalf("an old cursor after new messages: %+v", p)
	}
	if p := must[store.Page](t)(a.Changes(ctx, th, e2.Epoch, 0)); !p.Reset || len(p.Messages) != 1 || p.Messages[0].ID != e3.ID {
		t.Fatalf("an old v2 cursor after new messages: %+v", p)
	}
	for _, since := range []int64{0, e3.Epoch, e3.Epoch + 1e6} {
		if p := must[store.Page](t)(late.Since(ctx, th, since, 0)); p.Reset {
			t.Fatalf("since %d (not into the lost data): Reset", since)
		}
		if p := must[store.Page](t)(late.Changes(ctx, th, since, 0)); p.Reset {
			t.Fatalf("v2 since %d (not into the lost data): Reset", since)
		}
	}
	if p := must[store.Page](t)(a.Since(ctx, quiet, 0, 0)); p.Reset {
		t.Fatalf("a thread read without a cursor: %+v", p)
	}
}

// TestFollowLostDataResetsEveryThread: Redis restarts empty under a feed.
// Every thread the feed knew gets a Reset batch: one that existed before
// the feed started and one it announced. A thread that only has messages
// of the new data set is delivered. FeedLive is false from the loss until
// the feed caught up.
func TestFollowLostDataResetsEveryThread(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	ctx := t.Context()
	const before, announced, fresh = "b000000000000001", "a000000000000002", "f000000000000003"
	must[store.Entry](t)(a.Append(ctx, before, store.NewMessage{Text: "before the feed started"}))
	b := openStore(t, srv, Options{ResetAfter: -1})
	g := newGate()
	b.onLost = g.hook
	rec := follow(t, b)
	e := must[store.Entry](t)(a.Append(ctx, announced, store.NewMessage{Text: "announced"}))
	assert.Eventually(t, 10*time.Second, "the first message", func() bool { return len(rec.messages(announced)) == 1 })
	if !b.FeedLive() {
		t.Fatal("FeedLive false while the feed is subscribed")
	}

	srv.Restart(t)
	waitFor(t, g.lost, "the feed to notice the loss")
	assert.Eventually(t, 10*time.Second, "an append after the restart", func() bool {
		_, err := a.Append(ctx, announced, store.NewMessage{Text: "new data"})
		return err == nil
	})
	f1 := must[store.Entry](t)(a.Append(ctx, fresh, store.NewMessage{Text: "a thread of the new data"}))
	if b.FeedLive() {
		t.Fatal("FeedLive true while the feed is held")
	}
	close(g.open)

	assert.Eventually(t, 10*time.Second, "Reset batches and the new thread", func() bool {
		return rec.resets(before) == 1 && rec.resets(announced) == 1 && len(rec.messages(fresh)) == 1
	})
	assert.Eventually(t, 10*time.Second, "FeedLive after the catch-up", b.FeedLive)
	checkDelivered(t, rec, fresh, []store.Entry{f1})
	if rec.resets(fresh) != 0 {
		t.Fatal("the thread of the new data was reset")
	}
	// Live again, with no further Reset. (The message of the new data in
	// the reset thread was not handed on: its subscribers read it from
	// the store.)
	live := must[store.Entry](t)(a.Append(ctx, announced, store.NewMessage{Text: "live"}))
	assert.Eventually(t, 10*time.Second, "a live message", func() bool { return len(rec.messages(announced)) == 2 })
	checkDelivered(t, rec, announced, []store.Entry{e, live})
	if rec.resets(announced) != 1 || rec.resets(before) != 1 {
		t.Fatalf("resets %d and %d after the catch-up, want 1 and 1", rec.resets(announced), rec.resets(before))
	}
}

// TestReadNoticesLostData: the data is lost while the feed keeps its
// connection (FLUSHDB): the first read that finds the new data set makes
// the feed subscribe again, and it resets its threads.
func TestReadNoticesLostData(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	b := openStore(t, srv, Options{})
	rec := follow(t, b)
	ctx := t.Context()
	const th = "cccccccccccccccc"
	e := must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "soon gone"}))
	assert.Eventually(t, 10*time.Second, "the message", func() bool { return len(rec.messages(th)) == 1 })
	if err := srv.Client(t).FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if p := must[store.Page](t)(b.Since(ctx, th, e.Epoch, 0)); !p.Reset {
		t.Fatalf("a cursor into the flushed data: %+v", p)
	}
	assert.Eventually(t, 10*time.Second, "a Reset batch", func() bool { return rec.resets(th) == 1 })
}

// TestTicketKeyAfterLostData: the nodes that were running put their key
// back, so a node started after the loss adopts it; if a new node comes
// first, the running ones adopt its key.
func TestTicketKeyAfterLostData(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	ctx := t.Context()
	ka := must[[]byte](t)(a.TicketKey(ctx))
	must[store.Page](t)(a.Since(ctx, "dddddddddddddddd", 0, 0))

	srv.Restart(t)
	must[store.Page](t)(a.Since(ctx, "dddddddddddddddd", 0, 0)) // a notices the loss
	if k := must[[]byte](t)(openStore(t, srv, Options{}).TicketKey(ctx)); !bytes.Equal(k, ka) {
		t.Fatal("a node started after the loss made another key: the running node did not put its key back")
	}

	srv.Restart(t)
	kf := must[[]byte](t)(openStore(t, srv, Options{}).TicketKey(ctx)) // first after this loss
	if bytes.Equal(kf, ka) {
		t.Fatal("the new node found the old key in an empty Redis")
	}
	if k := must[[]byte](t)(a.TicketKey(ctx)); !bytes.Equal(k, kf) {
		t.Fatal("the running node does not adopt the key the new node made")
	}
}

// TestTimeoutBoundsCalls: a Redis that accepts connections but answers
// nothing (CLIENT PAUSE) fails every call with store_unavailable within
// Options.Timeout, not the client's 5s read timeout or the pause; a
// caller's shorter deadline is honoured too.
func TestTimeoutBoundsCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	const bound = 300 * time.Millisecond
	s := openStore(t, srv, Options{Timeout: bound})
	rl := NewRateLimiter(s, chatrelay.Windows{})
	sl := NewStreamLimiter(s, chatrelay.StreamLimits{}, 0)
	ctx := t.Context()
	const th, ip = "eeeeeeeeeeeeeeee", "192.0.2.9"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "before"}))

	srv.Pause(t, 4*time.Second)
	calls := []struct {
		name string
		do   func(context.Context) error
	}{
		{"append", func(ctx context.Context) error {
			_, err := s.Append(ctx, th, store.NewMessage{Text: "stalled"})
			return err
		}},
		{"since", func(ctx context.Context) error { _, err := s.Since(ctx, th, 0, 0); return err }},
		{"take", func(ctx context.Context) error { _, err := rl.Take(ctx, th, ip); return err }},
		{"acquire", func(ctx context.Context) error { _, err := sl.Acquire(ctx, th, ip, chatrelay.OwnerStream); return err }},
		{"ticket key", func(ctx context.Context) error { _, err := s.TicketKey(ctx); return err }},
		{"ping", s.Ping},
	}
	for _, c := range calls {
		start := time.Now()
		err := c.do(ctx)
		took := time.Since(start)
		if he := wantCode(t, err, chatrelay.StoreUnavailable); he.Retry <= 0 {
			t.Fatalf("%s: no retry in %+v", c.name, he)
		}
		if took > 3*bound {
			t.Fatalf("%s answered after %v, bound %v", c.name, took, bound)
		}
	}
	// A caller's deadline shorter than the bound wins.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	wantCode(t, s.Ping(short), chatrelay.StoreUnavailable)
	if took := time.Since(start); took >= bound {
		t.Fatalf("ping with a 50ms deadline answered after %v", took)
	}
	assert.Eventually(t, 10*time.Second, "Redis answering after the pause", func() bool { return s.Ping(ctx) == nil })
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestClientLogIsStructured: go-redis's own lines (here: a dial that
// failed) reach the store's logger as records with a level, not plain
// text on standard error. Not parallel: the lines go to the newest open
// store's logger, which must be this test's.
func TestClientLogIsStructured(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	var buf syncBuffer
	s := openStore(t, srv, Options{Log: slog.New(slog.NewJSONHandler(&buf, nil))})
	srv.Kill()
	wantCode(t, s.Ping(t.Context()), chatrelay.StoreUnavailable)
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct {
			Level, Msg, Detail string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Msg == "redis client" && rec.Level == "WARN" && strings.Contains(rec.Detail, "dial") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no structured record of the client's failed dial in:\n%s", buf.String())
	}
}

// TestWebhooksAfterLostData: a Redis restarted without its data loses the
// destinations' consumer groups and their record with the events. The
// node delivering them records them again: the events queued since are
// delivered (they were taken by no group, and warned about on every
// take), and a writer opened since (the host CLI) queues too.
func TestWebhooksAfterLostData(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	const dest = "0123456789abcdef"
	node := openStore(t, srv, Options{Webhooks: []string{dest}})
	ctx := t.Context()
	out := node.Outbox()
	take := func() []store.Due {
		t.Helper()
		due, err := out.Take(ctx, dest, time.Now(), 100)
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		for _, d := range due {
			if err := out.Done(ctx, dest, d); err != nil {
				t.Fatal(err)
			}
		}
		return due
	}
	must[store.Entry](t)(node.Append(ctx, "abcdabcdabcdabcd", store.NewMessage{Text: "before"}))
	if due := take(); len(due) != 1 {
		t.Fatalf("before the loss: %d events", len(due))
	}
	srv.Restart(t) // no persistence
	assert.Eventually(t, 10*time.Second, "Redis back", func() bool { return node.Check(ctx) == nil })
	must[store.Entry](t)(node.Append(ctx, "abcdabcdabcdabcd", store.NewMessage{Text: "after"}))
	if due := take(); len(due) != 1 {
		t.Fatalf("after the loss: %d events, want the one queued since", len(due))
	}
	cli := openStore(t, srv, Options{})
	must[store.Entry](t)(cli.Append(ctx, "abcdabcdabcdabcd", store.NewMessage{Text: "from the host"}))
	if due := take(); len(due) != 1 {
		t.Fatalf("a writer opened after the loss: %d events", len(due))
	}
}

// TestCallerGivingUpIsNoOutage: a call whose caller gave up (an MCP
// client's timeout ended its wait_messages, a request's client left) ends
// with the caller's context.Canceled, and that is no word of Redis: no
// "redis store unavailable" warning, and Redis is not marked down. Each
// agent whose SDK gives up on a wait logged the warning an operator
// alerts on while Redis answered every other call.
func TestCallerGivingUpIsNoOutage(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	var buf syncBuffer
	s := openStore(t, srv, Options{Log: slog.New(slog.NewJSONHandler(&buf, nil))})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Threads(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Threads with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := s.Since(ctx, "0123456789abcdef", 0, 50); !errors.Is(err, context.Canceled) {
		t.Fatalf("Since with a canceled context: %v, want context.Canceled", err)
	}
	if strings.Contains(buf.String(), "redis store unavailable") {
		t.Fatalf("a caller that gave up was logged as an outage:\n%s", buf.String())
	}
	if s.down.Load() {
		t.Fatal("a caller that gave up marked Redis down")
	}
}
