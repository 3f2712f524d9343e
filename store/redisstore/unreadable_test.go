package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// addBrokenEntry adds to the thread's log, after its newest message, an
// entry whose JSON does not parse (what `redis-cli XADD` by hand leaves),
// and returns its id.
func addBrokenEntry(t *testing.T, s *Store, thread string) string {
	t.Helper()
	ctx := t.Context()
	last := must[[]redis.XMessage](t)(s.rdb.XRevRangeN(ctx, s.logKey(thread), "+", "-", 1).Result())
	epoch := must[int64](t)(strconv.ParseInt(last[0].ID[:len(last[0].ID)-2], 10, 64))
	id := strconv.FormatInt(epoch+1, 10) + "-0"
	if err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.logKey(thread), ID: id, Values: []string{"j", `{"id":broken`}}).Err(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestUnreadableAppendLimited: the one-script post (AppendLimited) to a
// thread marked unreadable is refused as thread_unreadable and counts in
// no rate window, a post with a client_id (a replay is answered before
// the windows) included.
func TestUnreadableAppendLimited(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	s := openStore(t, srv, Options{Now: clk.Now})
	l := NewRateLimiter(s, chatrelay.Windows{PerThread: 10, PerIP: 10, Window: 10 * time.Minute})
	ctx := t.Context()
	const th, ip = "a1b2c3d4e5f60718", "192.0.2.7"
	window := func(key string) int64 { return s.rdb.LLen(ctx, s.prefix+"{rl}:"+key).Val() }
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "one", ClientID: "c1"}))
	addBrokenEntry(t, s, th)
	_, err := s.Since(ctx, th, 0, 0)
	wantCode(t, err, chatrelay.ThreadUnreadable)
	logLen := s.rdb.XLen(ctx, s.logKey(th)).Val()

	for _, m := range []store.NewMessage{{Text: "two"}, {Text: "one", ClientID: "c1"}, {Text: "three", ClientID: "c3"}} {
		_, done, err := s.AppendLimited(ctx, l, th, ip, m)
		if !done {
			t.Fatalf("AppendLimited of %+v did nothing", m)
		}
		wantCode(t, err, chatrelay.ThreadUnreadable)
	}
	if window("tl:"+th) != 0 || window("il:"+ip) != 0 {
		t.Fatalf("refused posts counted: the windows hold %d and %d posts, want 0 and 0", window("tl:"+th), window("il:"+ip))
	}
	if n := s.rdb.XLen(ctx, s.logKey(th)).Val(); n != logLen {
		t.Fatalf("the log holds %d entries after refused posts, want %d", n, logLen)
	}
}

// TestUnreadableMarkAndRepair: a write to a thread damaged since it was
// last read whole is stored (the store cannot tell without reading every
// message: docs/operations.md says so); the first read that meets the
// entry marks the thread, after which every read, even a poll from a
// cursor past the entry (which reads no message before it), and every
// write is refused, and the sweep keeps the thread as it is, past its
// retention; the repair docs/operations.md gives (delete the entry, then
// the mark) makes the thread work again.
func TestUnreadableMarkAndRepair(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	s := openStore(t, srv, Options{Now: clk.Now, Retention: chatrelay.Retention{Age: time.Hour}})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "one"}))
	bad := addBrokenEntry(t, s, th)
	clk.Advance(time.Second)
	after := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "two, written before any read"}))

	_, err := s.Since(ctx, th, after.Epoch, 0) // reads only the newest: the entry is not met
	if err != nil {
		t.Fatalf("a poll that meets no broken entry: %v", err)
	}
	_, err = s.Since(ctx, th, 0, 0)
	wantCode(t, err, chatrelay.ThreadUnreadable)
	if mark := s.rdb.HGet(ctx, s.metaKey(th), "unreadable").Val(); mark != bad {
		t.Fatalf("the mark is %q, want the broken entry %s", mark, bad)
	}
	_, err = s.Since(ctx, th, after.Epoch, 0)
	wantCode(t, err, chatrelay.ThreadUnreadable)
	_, err = s.Changes(ctx, th, after.Epoch, 0)
	wantCode(t, err, chatrelay.ThreadUnreadable)
	_, err = s.Append(ctx, th, store.NewMessage{Text: "three"})
	wantCode(t, err, chatrelay.ThreadUnreadable)

	clk.Advance(2 * time.Hour)
	must[store.SweepStats](t)(s.Sweep(ctx))
	if n := s.rdb.XLen(ctx, s.logKey(th)).Val(); n != 3 {
		t.Fatalf("the sweep left %d entries of a thread marked unreadable, want 3 (kept as it is)", n)
	}

	// The repair: delete the entry, then the mark.
	must[int64](t)(s.rdb.XDel(ctx, s.logKey(th), bad).Result())
	must[int64](t)(s.rdb.HDel(ctx, s.metaKey(th), "unreadable").Result())
	e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "repaired"}))
	p := must[store.Page](t)(s.Since(ctx, th, 0, 0))
	if len(p.Messages) == 0 || p.Messages[len(p.Messages)-1].ID != e.ID {
		t.Fatalf("after the repair the thread reads %+v, want the new post last", p.Messages)
	}
}

// TestAppendAfterAForeignEntry: an entry added to the log by hand with an
// id at or after the epoch an append takes (meta does not know of it)
// does not fail the append (before, Redis refused the XADD: an internal
// error): one that does not parse marks the thread unreadable and the
// append is refused as thread_unreadable; one that parses is taken as
// the newest, and the append is stored after it.
func TestAppendAfterAForeignEntry(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	s := openStore(t, srv, Options{Now: clk.Now})
	ctx := t.Context()
	const bad, good = "a1b2c3d4e5f60718", "a1b2c3d4e5f60719"
	for _, th := range []string{bad, good} {
		must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "one"}))
	}
	id := addBrokenEntry(t, s, bad) // the clock stands still: the next append's epoch is this entry's
	_, err := s.Append(ctx, bad, store.NewMessage{Text: "two"})
	wantCode(t, err, chatrelay.ThreadUnreadable)
	if mark := s.rdb.HGet(ctx, s.metaKey(bad), "unreadable").Val(); mark != id {
		t.Fatalf("the mark is %q, want the broken entry %s", mark, id)
	}

	foreign := `{"id":"MSG-20261023-184000-abcdef","epoch":1792778400001,"ts":"2026-10-23T18:40:00+00:00","author":"hermes","text":"restored"}`
	if err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.logKey(good), ID: "1792778400001-0", Values: []string{"j", foreign}}).Err(); err != nil {
		t.Fatal(err)
	}
	e := must[store.Entry](t)(s.Append(ctx, good, store.NewMessage{Text: "two"}))
	if e.Epoch != 1792778400002 {
		t.Fatalf("the append took epoch %d, want 1792778400002 (after the entry added by hand)", e.Epoch)
	}
	p := must[store.Page](t)(s.Since(ctx, good, 0, 0))
	if len(p.Messages) != 3 || p.Messages[1].Text != "restored" || p.Messages[2].ID != e.ID {
		t.Fatalf("the thread reads %+v", p.Messages)
	}
}
