package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// checkDelivered requires that rec handed on exactly want's messages for
// thread, in order, each once.
func checkDelivered(t *testing.T, rec *recorder, thread string, want []store.Entry) {
	t.Helper()
	got := rec.messages(thread)
	if len(got) != len(want) {
		t.Fatalf("thread %s: %d messages delivered, want %d", thread, len(got), len(want))
	}
	for i := range got {
		if got[i].ID != want[i].ID || got[i].Epoch != want[i].Epoch || string(got[i].JSON) != string(want[i].JSON) {
			t.Fatalf("thread %s message %d: %s, want %s", thread, i, got[i].JSON, want[i].JSON)
		}
	}
}

// TestFollowAcrossNodes: appends on two nodes reach both nodes' feeds,
// once each, in epoch order per thread.
func TestFollowAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a, b := openStore(t, srv, Options{}), openStore(t, srv, Options{})
	other := openStore(t, srv, Options{Prefix: "other:"})
	recA, recB, recOther := follow(t, a), follow(t, b), follow(t, other)
	ctx := t.Context()

	threads := []string{"1111111111111111", "2222222222222222", "3333333333333333"}
	const per = 40 // appends per writer per thread
	var mu sync.Mutex
	stored := map[string][]store.Entry{}
	var wg sync.WaitGroup
	for w, node := range []*Store{a, b, a, b} {
		for _, th := range threads {
			wg.Go(func() {
				for i := range per {
					e, err := node.Append(ctx, th, store.NewMessage{Text: fmt.Sprintf("w%d %d", w, i)})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					stored[th] = append(stored[th], e)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, th := range threads {
		p := must[store.Page](t)(a.Since(ctx, th, 0, 0))
		if len(p.Messages) != 4*per {
			t.Fatalf("thread %s holds %d messages", th, len(p.Messages))
		}
		for _, rec := range []*recorder{recA, recB} {
			assert.Eventually(t, 10*time.Second, "every message on every node", func() bool { return len(rec.messages(th)) >= 4*per })
			checkDelivered(t, rec, th, p.Messages)
			if rec.resets(th) != 0 {
				t.Fatalf("thread %s: Reset batches", th)
			}
		}
		if len(stored[th]) != 4*per {
			t.Fatalf("thread %s: %d appends acknowledged", th, len(stored[th]))
		}
	}
	// Another prefix is another deployment: its feed saw nothing. (Its
	// subscription saw Ready before any append; all appends reached b by
	// now through the same server.)
	if got := recOther.snapshot(); len(got) != 1 {
		t.Fatalf("other prefix's feed: %+v", got)
	}
}

// TestFollowConnectionKilled kills the feed's connection again and again
// (CLIENT KILL TYPE pubsub) while another node writes: each message still
// arrives once, in order, live or through the catch-up.
func TestFollowConnectionKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a, b := openStore(t, srv, Options{}), openStore(t, srv, Options{ResetAfter: -1})
	rec := follow(t, b)
	ctx := t.Context()
	threads := []string{"aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"}
	const n = 300
	kills := 0
	for i := range n {
		if _, err := a.Append(ctx, threads[i%2], store.NewMessage{Text: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if i%25 == 0 {
			kills += int(a.rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Val())
		}
	}
	t.Logf("killed %d feed connections", kills)
	for _, th := range threads {
		p := must[store.Page](t)(a.Since(ctx, th, 0, 0))
		assert.Eventually(t, 10*time.Second, "every message after the kills", func() bool { return len(rec.messages(th)) >= len(p.Messages) })
		checkDelivered(t, rec, th, p.Messages)
		if rec.resets(th) != 0 {
			t.Fatalf("thread %s: %d Reset batches, none expected", th, rec.resets(th))
		}
	}
}

// gate holds a Follow after it lost its connection until opened.
type gate struct {
	lost chan struct{} // closed at the first loss
	open chan struct{} // closed by the test
	once sync.Once
}

func newGate() *gate { return &gate{lost: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) hook(ctx context.Context) {
	g.once.Do(func() { close(g.lost) })
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestFollowRedisRestart kills Redis (persistence on) under a following
// node, checks that nothing is acknowledged meanwhile, restarts it, writes
// from another node before the follower is back, and requires the
// follower to catch up: the messages it missed arrive once and in order,
// and the thread whose missed messages retention already dropped gets a
// Reset batch.
func TestFollowRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	ret := chatrelay.Retention{Messages: 3}
	a := openStore(t, srv, Options{Retention: ret})
	b := openStore(t, srv, Options{Retention: ret, ResetAfter: -1}) // however long the gate holds it
	g := newGate()
	b.onLost = g.hook
	rec := follow(t, b)
	ctx := t.Context()
	const t1, t2, t3 = "1000000000000001", "2000000000000002", "3000000000000003"

	m1 := must[store.Entry](t)(a.Append(ctx, t1, store.NewMessage{Text: "before"}))
	m3 := must[store.Entry](t)(a.Append(ctx, t3, store.NewMessage{Text: "before"}))
	assert.Eventually(t, 10*time.Second, "the first messages", func() bool {
		return len(rec.messages(t1)) == 1 && len(rec.messages(t3)) == 1
	})

	srv.Kill()
	waitFor(t, g.lost, "Follow to notice the loss")
	_, err := a.Append(ctx, t1, store.NewMessage{Text: "while down"})
	if he := wantCode(t, err, chatrelay.StoreUnavailable); he.Retry <= 0 {
		t.Fatalf("no retry: %+v", he)
	}
	_, err = a.Since(ctx, t1, 0, 0)
	wantCode(t, err, chatrelay.StoreUnavailable)

	srv.Restart(t)
	var after2 []store.Entry
	assert.Eventually(t, 10*time.Second, "an append after the restart", func() bool {
		e, err := a.Append(ctx, t2, store.NewMessage{Text: "t2 first"})
		if err == nil {
			after2 = append(after2, e)
		}
		return err == nil
	})
	p := must[store.Page](t)(a.Since(ctx, t1, 0, 0))
	if len(p.Messages) != 1 || p.Messages[0].ID != m1.ID {
		t.Fatalf("after the restart t1 holds %+v, want only %s", p.Messages, m1.ID)
	}
	for i := range 5 { // more than retention keeps: b misses some for good
		must[store.Entry](t)(a.Append(ctx, t1, store.NewMessage{Text: fmt.Sprint("t1 ", i)}))
	}
	after2 = append(after2, must[store.Entry](t)(a.Append(ctx, t2, store.NewMessage{Text: "t2 second"})))
	after3 := must[store.Entry](t)(a.Append(ctx, t3, store.NewMessage{Text: "t3 second"}))
	close(g.open)

	// The catch-up takes the threads in any order: wait for all three.
	assert.Eventually(t, 10*time.Second, "the catch-up", func() bool {
		return len(rec.messages(t2)) == 2 && len(rec.messages(t3)) == 2 && rec.resets(t1) == 1
	})
	// t2 was created while b was away: both messages, no Reset.
	checkDelivered(t, rec, t2, after2)
	checkDelivered(t, rec, t3, []store.Entry{m3, after3})
	// t1: retention dropped 2 messages b never saw: Reset, with what is left.
	if rec.resets(t1) != 1 || rec.resets(t2) != 0 || rec.resets(t3) != 0 {
		t.Fatalf("resets t1 %d t2 %d t3 %d, want 1 0 0", rec.resets(t1), rec.resets(t2), rec.resets(t3))
	}
	kept := must[store.Page](t)(a.Since(ctx, t1, 0, 0)).Messages
	checkDelivered(t, rec, t1, append([]store.Entry{m1}, kept...))

	// Live again.
	live := must[store.Entry](t)(a.Append(ctx, t2, store.NewMessage{Text: "live"}))
	assert.Eventually(t, 10*time.Second, "a live message after the catch-up", func() bool { return len(rec.messages(t2)) == 3 })
	checkDelivered(t, rec, t2, append(after2, live))
}

// TestFollowRedisLostData restarts Redis without persistence: the thread
// the follower knew is gone, so it gets a Reset; the thread's next message
// (a new thread now) is delivered.
func TestFollowRedisLostData(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a, b := openStore(t, srv, Options{}), openStore(t, srv, Options{ResetAfter: -1})
	rec := follow(t, b)
	ctx := t.Context()
	const th = "abcdefabcdef0123"
	must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "lost soon"}))
	assert.Eventually(t, 10*time.Second, "the first message", func() bool { return len(rec.messages(th)) == 1 })
	srv.Restart(t)
	assert.Eventually(t, 10*time.Second, "a Reset for the vanished thread", func() bool { return rec.resets(th) == 1 })
	var e store.Entry
	assert.Eventually(t, 10*time.Second, "an append after the restart", func() bool {
		var err error
		e, err = a.Append(ctx, th, store.NewMessage{Text: "again"})
		return err == nil
	})
	assert.Eventually(t, 10*time.Second, "the new message", func() bool { return len(rec.messages(th)) == 2 })
	if got := rec.messages(th)[1]; got.ID != e.ID {
		t.Fatalf("delivered %s, want %s", got.JSON, e.JSON)
	}
}

// TestFollowClose: Close ends Follow, and Follow after Close fails.
func TestFollowClose(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s, err := Open(t.Context(), srv.URL(), Options{Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	done := make(chan error, 1)
	go func() { done <- s.Follow(context.Background(), rec.fn) }()
	waitFor(t, rec.ready, "Ready")
	s.Close()
	select {
	case err := <-done:
		if err != ErrClosed {
			t.Fatalf("Follow returned %v after Close", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return after Close")
	}
	if err := s.Follow(context.Background(), rec.fn); err != ErrClosed {
		t.Fatalf("Follow after Close: %v", err)
	}
}

// TestFollowSilentConnection: a feed connection that stops answering (all
// clients paused) is noticed by the ping, replaced, and caught up.
func TestFollowSilentConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	b := openStore(t, srv, Options{})
	b.pingEvery = 100 * time.Millisecond
	g := newGate()
	b.onLost = g.hook
	close(g.open) // only observe the loss
	rec := follow(t, b)
	ctx := t.Context()
	const th = "5555555555555555"
	e1 := must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "before"}))
	assert.Eventually(t, 10*time.Second, "the first message", func() bool { return len(rec.messages(th)) == 1 })
	if err := a.rdb.Do(ctx, "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, g.lost, "Follow to notice the silence")
	var e2 store.Entry
	assert.Eventually(t, 10*time.Second, "an append after the pause", func() bool {
		var err error
		e2, err = a.Append(ctx, th, store.NewMessage{Text: "after"})
		return err == nil
	})
	assert.Eventually(t, 10*time.Second, "the message after the pause", func() bool { return len(rec.messages(th)) == 2 })
	checkDelivered(t, rec, th, []store.Entry{e1, e2})
}

// TestFollowResetAfter: a loss longer than ResetAfter resets every known
// thread (streams end); the feed then catches up once Redis is back.
func TestFollowResetAfter(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	a := openStore(t, srv, Options{})
	const known, old, quiet = "7777777777777777", "8888888888888888", "9999999999999999"
	must[store.Entry](t)(a.Append(t.Context(), old, store.NewMessage{Text: "before b started"}))
	b := openStore(t, srv, Options{ResetAfter: 300 * time.Millisecond})
	rec := follow(t, b)
	ctx := t.Context()
	e1 := must[store.Entry](t)(a.Append(ctx, known, store.NewMessage{Text: "one"}))
	assert.Eventually(t, 10*time.Second, "the first message", func() bool { return len(rec.messages(known)) == 1 })

	srv.Kill()
	assert.Eventually(t, 10*time.Second, "Reset batches", func() bool { return rec.resets(known) == 1 && rec.resets(old) == 1 })
	if rec.resets(quiet) != 0 {
		t.Fatal("an unknown thread was reset")
	}
	srv.Restart(t)
	var e2 store.Entry
	assert.Eventually(t, 10*time.Second, "an append after the restart", func() bool {
		var err error
		e2, err = a.Append(ctx, known, store.NewMessage{Text: "two"})
		return err == nil
	})
	assert.Eventually(t, 10*time.Second, "the message after the restart", func() bool { return len(rec.messages(known)) == 2 })
	checkDelivered(t, rec, known, []store.Entry{e1, e2})
	if rec.resets(known) != 1 {
		t.Fatalf("%d resets after the catch-up", rec.resets(known))
	}
}

// TestFollowChaos: writers on two nodes append without pause (retrying
// while Redis is down) while Redis is killed and restarted (persistence
// on) and feed connections are killed. At the end each follower has
// handed on exactly what is stored, in order, once each, and that includes
// every acknowledged message.
func TestFollowChaos(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	opt := Options{ResetAfter: -1, Retention: chatrelay.Retention{Messages: 1000}}
	a, b, c := openStore(t, srv, opt), openStore(t, srv, opt), openStore(t, srv, opt)
	recB, recC := follow(t, b), follow(t, c)
	ctx := t.Context()
	threads := []string{"c000000000000001", "c000000000000002", "c000000000000003"}
	const perWriter = 300

	var mu sync.Mutex
	acked := map[string]bool{} // ids
	var progress, retries atomic.Int64
	var wg sync.WaitGroup
	for w, node := range []*Store{a, b, a, b} {
		wg.Go(func() {
			for i := range perWriter {
				th := threads[(w+i)%len(threads)]
				for {
					e, err := node.Append(ctx, th, store.NewMessage{Text: fmt.Sprintf("w%d m%d", w, i)})
					if err == nil {
						mu.Lock()
						acked[e.ID] = true
						mu.Unlock()
						break
					}
					if chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
						t.Error(err)
						return
					}
					retries.Add(1)
					select {
					case <-ctx.Done():
						return
					case <-time.After(10 * time.Millisecond): // the client's retry wait
					}
				}
				progress.Add(1)
			}
		})
	}
	total := int64(4 * perWriter)
	assert.Eventually(t, 30*time.Second, "a third of the appends", func() bool { return progress.Load() >= total/3 })
	atRestart := progress.Load()
	srv.Restart(t)
	assert.Eventually(t, 30*time.Second, "two thirds of the appends", func() bool { return progress.Load() >= 2*total/3 })
	atKill := progress.Load()
	killed := a.rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Val()
	wg.Wait()
	t.Logf("restart at %d of %d appends, %d feed connections killed at %d; %d appends retried", atRestart, total, killed, atKill, retries.Load())
	if atRestart >= total {
		t.Fatal("the writers finished before the restart")
	}

	for _, th := range threads {
		stored := must[store.Page](t)(a.Since(ctx, th, 0, 0)).Messages
		for _, rec := range []*recorder{recB, recC} {
			assert.Eventually(t, 10*time.Second, "every stored message", func() bool { return len(rec.messages(th)) >= len(stored) })
			checkDelivered(t, rec, th, stored)
			if rec.resets(th) != 0 {
				t.Fatalf("thread %s: Reset batches, none expected", th)
			}
		}
		for _, e := range stored {
			delete(acked, e.ID)
		}
	}
	if len(acked) != 0 {
		t.Fatalf("%d acknowledged messages are not stored", len(acked))
	}
}

// TestFollowHalfOpenConnection: the feed's connection goes silent without
// closing (a NAT or a firewall that dropped it, a stalled path) while
// every other connection to Redis keeps working, at the store's default
// ping. A message stored meanwhile still reaches the feed within seconds,
// not after two silent ping periods (30 s) during which the node's streams
// got nothing and /readyz said the feed was live.
func TestFollowHalfOpenConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	proxy := redistest.StartProxy(t, srv)
	a := openStore(t, srv, Options{})
	b, err := Open(t.Context(), proxy.URL(), Options{Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	rec := follow(t, b)
	ctx := t.Context()
	const th = "6666666666666666"
	e1 := must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "before"}))
	assert.Eventually(t, 10*time.Second, "the first message", func() bool { return len(rec.messages(th)) == 1 })
	if n := proxy.StallSubscribers(t, srv); n != 1 {
		t.Fatalf("%d feed connections stalled, want 1", n)
	}
	e2 := must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "after"}))
	assert.Eventually(t, 10*time.Second, "the message stored once the feed's connection went silent", func() bool { return len(rec.messages(th)) == 2 })
	checkDelivered(t, rec, th, []store.Entry{e1, e2})
}
