package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// TestReadsWhenRedisIsFull: a full Redis (maxmemory with noeviction)
// refuses writes, but a person can still read their conversation: v1 and
// v2 polls, with and without a cursor, the thread list and a feed's
// catch-up after it lost its connection answer what is stored, while a
// post answers store_unavailable and stores nothing. Before, every one of
// those reads was a MULTI (or a script that creates the generation),
// which a full Redis refuses: they answered 503 too. Once Redis has room
// again, everything works.
func TestReadsWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	b := openStore(t, srv, Options{ResetAfter: -1}) // a node whose feed is away while Redis fills
	g := newGate()
	b.onLost = g.hook
	rec := follow(t, b)
	ctx := t.Context()
	const th, other = "a1b2c3d4e5f60718", "0123456789abcdef"
	var sent []store.Entry
	for i := range 3 {
		sent = append(sent, must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: fmt.Sprint("stored ", i)})))
	}
	must[store.Entry](t)(a.Append(ctx, other, store.NewMessage{Text: "another thread"}))
	// A reaction: th has v2 state (Since then reads the v2 objects too).
	reacted := must[store.Entry](t)(a.Change(ctx, th, store.Change{Op: store.React, MessageID: sent[0].ID, Emoji: "👍", By: chatrelay.Hermes}))
	first := sent[0]
	sent[0] = reacted
	assert.Eventually(t, 10*time.Second, "the feed has the first messages", func() bool { return len(rec.messages(th)) == 4 })

	// b's feed loses its connection; one more message comes meanwhile,
	// then Redis is full before the feed is back to catch up.
	a.rdb.ClientKillByFilter(ctx, "TYPE", "pubsub")
	waitFor(t, g.lost, "the feed to notice the loss")
	sent = append(sent, must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "while the feed was away"})))
	rdb := srv.Client(t)
	fillRedis(t, rdb)
	close(g.open)

	ids := func(es []store.Entry) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.ID
		}
		return out
	}
	for _, r := range []store.Store{a, b} {
		p, err := r.Since(ctx, th, 0, 50)
		if err != nil {
			t.Fatalf("a v1 poll of the full Redis: %v", err)
		}
		assert.Equal(t, "v1 poll: the stored messages", fmt.Sprint(ids(p.Messages)), fmt.Sprint(ids(sent)))
		assert.Equal(t, "v1 poll: its cursor", p.Cursor, sent[3].Epoch)
		assert.Equal(t, "v1 poll: the reaction", string(p.Messages[0].JSON), string(reacted.JSON))
		p, err = r.Since(ctx, th, sent[1].Epoch, 50)
		if err != nil {
			t.Fatalf("a v1 poll with a cursor of the full Redis: %v", err)
		}
		assert.Equal(t, "v1 poll after the second", fmt.Sprint(ids(p.Messages)), fmt.Sprint(ids(sent[2:])))
		p, err = r.Changes(ctx, th, 0, 50)
		if err != nil {
			t.Fatalf("a v2 poll of the full Redis: %v", err)
		}
		assert.Equal(t, "v2 poll: the stored messages", fmt.Sprint(ids(p.Messages)), fmt.Sprint(ids(sent)))
		p, err = r.Changes(ctx, th, sent[3].Epoch, 50)
		if err != nil {
			t.Fatalf("a v2 poll with a cursor of the full Redis: %v", err)
		}
		if len(p.Messages) != 0 || p.Reset {
			t.Fatalf("v2 poll at the cursor: %+v, want nothing new", p)
		}
		infos, err := r.Threads(ctx)
		if err != nil {
			t.Fatalf("the thread list of the full Redis: %v", err)
		}
		assert.Equal(t, "threads listed", len(infos), 2)
	}
	assert.Eventually(t, 10*time.Second, "the feed's catch-up while Redis is full", func() bool {
		return len(rec.messages(th)) == 5
	})
	checkDelivered(t, rec, th, []store.Entry{first, sent[1], sent[2], reacted, sent[3]})

	// Writes are refused and store nothing.
	_, err := a.Append(ctx, th, store.NewMessage{Text: "while full"})
	if he := wantCode(t, err, chatrelay.StoreUnavailable); he.Retry <= 0 {
		t.Fatalf("a post to the full Redis: not retryable: %+v", he)
	}
	_, err = a.Append(ctx, "fedcba9876543210", store.NewMessage{Text: "a new thread while full"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	p := must[store.Page](t)(a.Since(ctx, th, 0, 0))
	assert.Equal(t, "after the refused post", len(p.Messages), 4)
	assert.Equal(t, "threads after the refused post", len(must[[]store.ThreadInfo](t)(a.Threads(ctx))), 2)

	// Room again.
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	e := must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "room again"}))
	p = must[store.Page](t)(b.Since(ctx, th, sent[3].Epoch, 0))
	assert.Equal(t, "after room again", fmt.Sprint(ids(p.Messages)), fmt.Sprint([]string{e.ID}))
	assert.Eventually(t, 10*time.Second, "the feed live again", func() bool { return len(rec.messages(th)) == 6 })
}

// TestFullRedisWithoutGeneration: the generation (gen.go) is created by
// the first read of a data set, a write: a full Redis refuses that very
// read (503, retryable), and the first read once it has room creates it.
func TestFullRedisWithoutGeneration(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "stored"}))
	rdb := srv.Client(t)
	if err := rdb.Del(ctx, s.genKey).Err(); err != nil {
		t.Fatal(err)
	}
	fillRedis(t, rdb)
	_, err := s.Since(ctx, th, 0, 0)
	wantCode(t, err, chatrelay.StoreUnavailable)
	_, err = s.Changes(ctx, th, 0, 0)
	wantCode(t, err, chatrelay.StoreUnavailable)
	if n := rdb.Exists(ctx, s.genKey).Val(); n != 0 {
		t.Fatalf("a generation was created in the full Redis")
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	p := must[store.Page](t)(s.Changes(ctx, th, 0, 0))
	if len(p.Messages) != 1 || p.Messages[0].ID != e.ID {
		t.Fatalf("after room again: %+v", p.Messages)
	}
	if rdb.HGet(ctx, s.genKey, "id").Val() == "" {
		t.Fatal("no generation after the first read")
	}
	fillRedis(t, rdb) // with the generation: reads work
	p = must[store.Page](t)(s.Since(ctx, th, 0, 0))
	assert.Equal(t, "a poll of the full Redis", len(p.Messages), 1)
}

// TestReadScriptAnswersAsTx: Since reads with a MULTI (readTx) and, when
// Redis is full, with a script that only reads (readScripted): both answer
// the same for every kind of thread and page.
func TestReadScriptAnswersAsTx(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{Retention: chatrelay.Retention{Messages: 4}})
	ctx := t.Context()
	const plain, titled, swept, marked, none = "1000000000000001", "2000000000000002", "3000000000000003", "4000000000000004", "5000000000000005"
	var es []store.Entry
	for i := range 3 {
		es = append(es, must[store.Entry](t)(s.Append(ctx, plain, store.NewMessage{Text: fmt.Sprint("plain ", i)})))
	}
	must[store.Entry](t)(s.Append(ctx, titled, store.NewMessage{Text: "titled", Title: "a title"}))
	must[store.Entry](t)(s.Change(ctx, titled, store.Change{Op: store.React, MessageID: must[store.Page](t)(s.Since(ctx, titled, 0, 0)).Messages[0].ID, Emoji: "👍", By: chatrelay.Hermes}))
	for i := range 6 {
		must[store.Entry](t)(s.Append(ctx, swept, store.NewMessage{Text: fmt.Sprint("swept ", i)}))
	}
	must[store.SweepStats](t)(s.Sweep(ctx))
	must[store.Entry](t)(s.Append(ctx, marked, store.NewMessage{Text: "marked"}))
	if err := s.rdb.HSet(ctx, s.metaKey(marked), markField, "an entry").Err(); err != nil {
		t.Fatal(err)
	}
	// The states the threads are in.
	if r := must[[]string](t)(s.readTx(ctx, swept, "1-0", 0)); r[3] == "0" || len(r) != 8+2*4 {
		t.Fatalf("swept: %q, want trimmed and 4 messages", r)
	}
	if r := must[[]string](t)(s.readTx(ctx, titled, "1-0", 0)); r[4] != "1" || r[5] != "a title" {
		t.Fatalf("titled: %q, want v2 and a title", r)
	}
	if r := must[[]string](t)(s.readTx(ctx, marked, "1-0", 0)); r[0] != "unreadable" {
		t.Fatalf("marked: %q", r)
	}
	for _, th := range []string{plain, titled, swept, marked, none} {
		for _, since := range []int64{0, es[0].Epoch, es[2].Epoch, maxEpoch} {
			for _, limit := range []int{0, 2, 50} {
				from := fmt.Sprint(since+1, "-0")
				tx := must[[]string](t)(s.readTx(ctx, th, from, limit))
				sc := must[[]string](t)(s.readScripted(ctx, th, from, limit))
				assert.Equal(t, fmt.Sprintf("thread %s since %d limit %d", th, since, limit), fmt.Sprintf("%q", sc), fmt.Sprintf("%q", tx))
			}
		}
	}
}

// TestTicketKeyWhenRedisIsFull: a node started while Redis is full (a
// restart, a node added) reads the shared ticket key and so can serve the
// reads a full Redis answers. Before, TicketKey was a MULTI (SET NX, GET),
// which a full Redis refuses: serve could not start.
func TestTicketKeyWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	ctx := t.Context()
	k := must[[]byte](t)(openStore(t, srv, Options{}).TicketKey(ctx))
	fillRedis(t, srv.Client(t))
	if got := must[[]byte](t)(openStore(t, srv, Options{}).TicketKey(ctx)); !bytes.Equal(got, k) {
		t.Fatal("a node started while Redis is full reads another ticket key")
	}
}

// TestShardsOpenWhenRedisIsFull: a node started on shards (instances)
// while they are full checks and adopts their shard records without a
// write, and answers polls. Before, the check was a MULTI and the claim a
// SET NX, both refused by a full Redis: the node could not start.
func TestShardsOpenWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t, redistest.ServerOptions{}), redistest.StartServer(t, redistest.ServerOptions{})
	spec := a.URL() + "," + b.URL()
	sh := openSharded(t, spec, Options{})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	e := must[store.Entry](t)(sh.Append(ctx, th, store.NewMessage{Text: "stored"}))
	fillRedis(t, a.Client(t))
	fillRedis(t, b.Client(t))
	again := openSharded(t, spec, Options{})
	p := must[store.Page](t)(again.Since(ctx, th, 0, 0))
	if len(p.Messages) != 1 || p.Messages[0].ID != e.ID {
		t.Fatalf("a poll of the full shards: %+v", p.Messages)
	}
}

// TestClusterReadsWhenFull: on a Redis Cluster whose primaries are full, a
// node started then opens, and polls (v1 and v2) and the thread list
// answer: the read-only scripts' keys are in their shard's slot.
func TestClusterReadsWhenFull(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterOptions{Primaries: 3})
	sh := openSharded(t, c.URL(), Options{})
	ctx := t.Context()
	threads := []string{"a1b2c3d4e5f60718", "0123456789abcdef", "fedcba9876543210", "1111222233334444"}
	stored := map[string]store.Entry{}
	for _, th := range threads {
		stored[th] = must[store.Entry](t)(sh.Append(ctx, th, store.NewMessage{Text: "stored " + th}))
	}
	for _, n := range c.Nodes { // each primary
		redistest.Fill(t, n.Client(t))
	}
	for _, th := range threads {
		if err := c.Client(t).Set(ctx, "probe{"+th+"}", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
			t.Fatalf("a write to the full cluster: %v, want OOM", err)
		}
	}
	again := openSharded(t, c.URL(), Options{})
	for _, th := range threads {
		for name, read := range map[string]func(context.Context, string, int64, int) (store.Page, error){"Since": again.Since, "Changes": again.Changes} {
			p, err := read(ctx, th, 0, 0)
			if err != nil {
				t.Fatalf("%s of %s on the full cluster: %v", name, th, err)
			}
			if len(p.Messages) != 1 || p.Messages[0].ID != stored[th].ID {
				t.Fatalf("%s of %s on the full cluster: %+v", name, th, p.Messages)
			}
		}
	}
	assert.Equal(t, "threads listed", len(must[[]store.ThreadInfo](t)(again.Threads(ctx))), len(threads))
	_, err := again.Append(ctx, threads[0], store.NewMessage{Text: "while full"})
	wantCode(t, err, chatrelay.StoreUnavailable)
}
