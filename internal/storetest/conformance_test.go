package storetest

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// The store conformance suite: every behaviour of store.Store, run on each
// backend. A backend that passes it can serve the contract; a new backend
// is added to Backends and must pass it unchanged.

var (
	idPattern = regexp.MustCompile(`^MSG-\d{8}-\d{6}-[0-9a-f]{6}$`)
	t0        = time.Date(2026, 10, 23, 18, 40, 0, 123e6, time.UTC)
)

const (
	thA = "000000000000000a"
	thB = "000000000000000b"
	thC = "000000000000000c"
	thD = "000000000000000d"
	thE = "000000000000000e"
)

func appendText(t *testing.T, st store.Store, thread string, author chatrelay.Author, text string) store.Entry {
	t.Helper()
	e, err := st.Append(context.Background(), thread, store.NewMessage{Author: author, Text: text})
	assert.Success(t, err)
	return e
}

func since(t *testing.T, st store.Store, thread string, after int64, limit int) store.Page {
	t.Helper()
	p, err := st.Since(context.Background(), thread, after, limit)
	assert.Success(t, err)
	return p
}

// feedLog is what a Follow of a store handed on, for the feed's cases.
type feedLog struct {
	mu         sync.Mutex
	got        []store.Batch
	readyFirst bool // no batch came before Ready
	cancel     context.CancelFunc
	done       chan error
}

// follow follows st's feed until stop (or the test's end), and returns
// once the feed is ready.
func follow(t *testing.T, st store.Store) *feedLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l := &feedLog{readyFirst: true, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		l.done <- st.Follow(ctx, func(bt store.Batch) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if bt.Ready {
				l.readyFirst = l.readyFirst && len(l.got) == 0
				once.Do(func() { close(ready) })
				return
			}
			l.got = append(l.got, bt)
		})
	}()
	<-ready
	return l
}

// batches returns the batches handed on so far.
func (l *feedLog) batches() []store.Batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// messages returns the changes of the batches handed on so far, in order.
func (l *feedLog) messages() []store.Entry {
	var out []store.Entry
	for _, bt := range l.batches() {
		out = append(out, bt.Messages...)
	}
	return out
}

// stop ends the follow: the feed ends without an error.
func (l *feedLog) stop(t *testing.T) {
	t.Helper()
	l.cancel()
	assert.Success(t, <-l.done)
}

func TestConformance(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		for _, tc := range []struct {
			name string
			opt  Options
			run  func(t *testing.T, b *Backend, clk *testclock.Clock)
		}{
			{"an unknown thread is an empty page and creates nothing", Options{}, func(t *testing.T, b *Backend, _ *testclock.Clock) {
				p := since(t, b.Store, thA, 0, chatrelay.PollPage)
				assert.Equal(t, "page", p, store.Page{Thread: thA})
				p = since(t, b.Store, thA, 12345, 0)
				assert.Equal(t, "page after a cursor", p, store.Page{Thread: thA})
				assert.Equal(t, "threads", b.Threads(t), []string(nil))
			}},
			{"append gives ids, strictly increasing epochs and ts of the same second", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				var prev int64
				ids := map[string]bool{}
				for i := range 30 { // the clock stands still: epochs still increase
					e := appendText(t, b.Store, thA, "", "m")
					assert.True(t, idPattern.MatchString(e.ID), "id %q", e.ID)
					assert.True(t, !ids[e.ID], "id %q given twice", e.ID)
					ids[e.ID] = true
					assert.True(t, e.Epoch > prev, "epoch %d after %d", e.Epoch, prev)
					prev = e.Epoch
					at := time.UnixMilli(e.Epoch).UTC()
					assert.Equal(t, "ts", e.TS, at.Format("2006-01-02T15:04:05+00:00"))
					assert.Equal(t, "id's time", e.ID[4:19], at.Format("20060102-150405"))
					assert.Equal(t, "default author", e.Author, chatrelay.Operator)
					if i == 0 {
						assert.Equal(t, "first epoch", e.Epoch, clk.Now().UnixMilli())
					}
				}
				clk.Set(t0.Add(-time.Hour)) // a clock that went back: still increasing
				assert.True(t, appendText(t, b.Store, thA, "", "after").Epoch > prev, "epoch went back with the clock")
			}},
			{"since pages: newest N without a cursor, everything after one", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				var es []store.Entry
				for i := range 60 {
					clk.Advance(time.Second)
					author := chatrelay.Operator
					if i%2 == 1 {
						author = chatrelay.Hermes
					}
					es = append(es, appendText(t, b.Store, thA, author, "m"))
				}
				p := since(t, b.Store, thA, 0, chatrelay.PollPage)
				assert.Equal(t, "newest page", len(p.Messages), chatrelay.PollPage)
				assert.Equal(t, "oldest of the page", p.Messages[0].ID, es[10].ID)
				assert.Equal(t, "cursor", p.Cursor, es[59].Epoch)
				assert.Equal(t, "awaiting after hermes", p.Awaiting, false)
				p = since(t, b.Store, thA, es[55].Epoch, 0)
				assert.Equal(t, "after a cursor", len(p.Messages), 4)
				assert.Equal(t, "first after the cursor", p.Messages[0].ID, es[56].ID)
				assert.Equal(t, "no reset", p.Reset, false)
				p = since(t, b.Store, thA, es[59].Epoch, 0)
				assert.Equal(t, "after the newest", len(p.Messages), 0)
				assert.Equal(t, "cursor still the newest", p.Cursor, es[59].Epoch)
				appendText(t, b.Store, thA, chatrelay.Agent, "the in-page AI")
				assert.Equal(t, "awaiting after agent", since(t, b.Store, thA, 0, 1).Awaiting, true)
				for _, m := range since(t, b.Store, thA, 0, 0).Messages {
					assert.Equal(t, "JSON of message "+m.ID, string(m.JSON), string(chatrelay.MarshalMessage(m.Message)))
				}
			}},
			{"retention by count trims on append and tells a stale cursor to reset", Options{Retention: chatrelay.Retention{Messages: 3}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				var es []store.Entry
				for range 5 {
					clk.Advance(time.Second)
					es = append(es, appendText(t, b.Store, thA, "", "m"))
				}
				p := since(t, b.Store, thA, 0, 0)
				assert.Equal(t, "kept", len(p.Messages), 3)
				assert.Equal(t, "oldest kept", p.Messages[0].ID, es[2].ID)
				assert.Equal(t, "a cursor before what was dropped resets", since(t, b.Store, thA, es[0].Epoch, 0).Reset, true)
				assert.Equal(t, "a cursor at the newest dropped resets not", since(t, b.Store, thA, es[1].Epoch, 0).Reset, false)
				assert.Equal(t, "no cursor resets not", since(t, b.Store, thA, 0, 0).Reset, false)
			}},
			{"retention by age, on append and by the sweep, which removes an expired thread", Options{Retention: chatrelay.Retention{Age: time.Hour}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				old := appendText(t, b.Store, thA, "", "old")
				appendText(t, b.Store, thB, "", "old too")
				clk.Advance(2 * time.Hour)
				appendText(t, b.Store, thA, "", "new")
				p := since(t, b.Store, thA, 0, 0)
				assert.Equal(t, "kept on append", len(p.Messages), 1)
				assert.Equal(t, "reset for a cursor before the expired", since(t, b.Store, thA, old.Epoch-1, 0).Reset, true)
				st, err := b.Store.Sweep(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)
				assert.Equal(t, "threads", b.Threads(t), []string{thA})
			}},
			{"retention by age drops each message once it is past the age, on append", Options{Retention: chatrelay.Retention{Age: time.Hour}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				var es []store.Entry
				for _, step := range []time.Duration{0, 20 * time.Minute, 20 * time.Minute, 30 * time.Minute, 20 * time.Minute, 30 * time.Minute} {
					clk.Advance(step)
					es = append(es, appendText(t, b.Store, thA, "", "m"))
				}
				// At 0, 20, 40, 70, 90 and 120 minutes: at 120 those of 70
				// and later are within the hour.
				p := since(t, b.Store, thA, 0, 0)
				assert.Equal(t, "kept", len(p.Messages), 3)
				assert.Equal(t, "oldest kept", p.Messages[0].ID, es[3].ID)
				assert.Equal(t, "a cursor before what was dropped resets", since(t, b.Store, thA, es[1].Epoch, 0).Reset, true)
				assert.Equal(t, "a cursor at the newest dropped resets not", since(t, b.Store, thA, es[2].Epoch, 0).Reset, false)
			}},
			{"MustExist refuses to create a thread", Options{}, func(t *testing.T, b *Backend, _ *testclock.Clock) {
				_, err := b.Store.Append(context.Background(), thA, store.NewMessage{Author: chatrelay.Hermes, Text: "x", MustExist: true})
				assert.Code(t, err, chatrelay.NotFound)
				assert.Equal(t, "threads", b.Threads(t), []string(nil))
				appendText(t, b.Store, thA, "", "hello")
				_, err = b.Store.Append(context.Background(), thA, store.NewMessage{Author: chatrelay.Hermes, Text: "x", MustExist: true})
				assert.Success(t, err)
			}},
			{"the thread limit refuses a new thread, never an existing one", Options{MaxThreads: 2}, func(t *testing.T, b *Backend, _ *testclock.Clock) {
				appendText(t, b.Store, thA, "", "a")
				appendText(t, b.Store, thB, "", "b")
				_, err := b.Store.Append(context.Background(), thC, store.NewMessage{Text: "c"})
				assert.Code(t, err, chatrelay.ThreadLimit)
				appendText(t, b.Store, thA, "", "a again")
				assert.Equal(t, "threads", len(b.Threads(t)), 2)
			}},
			{"bad input is refused with its code, never stored", Options{}, func(t *testing.T, b *Backend, _ *testclock.Clock) {
				ctx := context.Background()
				for _, tc := range []struct {
					thread, text string
					code         chatrelay.Code
				}{
					{"XYZ", "hi", chatrelay.InvalidThread},
					{"000000000000000A", "hi", chatrelay.InvalidThread},
					{thA, "   ", chatrelay.InvalidText},
					{thA, "\xff", chatrelay.InvalidText},
					{thA, strings.Repeat("é", chatrelay.MaxText+1), chatrelay.TextTooLong},
				} {
					_, err := b.Store.Append(ctx, tc.thread, store.NewMessage{Text: tc.text})
					assert.Code(t, err, tc.code)
				}
				_, err := b.Store.Since(ctx, "nope", 0, 0)
				assert.Code(t, err, chatrelay.InvalidThread)
				e := appendText(t, b.Store, thA, "", strings.Repeat("é", chatrelay.MaxText))
				assert.Equal(t, "text at the limit", len([]rune(e.Text)), chatrelay.MaxText)
				assert.Equal(t, "threads", b.Threads(t), []string{thA})
			}},
			{"threads: newest activity first, with their summary", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "a")
				clk.Advance(time.Second)
				appendText(t, b.Store, thB, "", "b")
				clk.Advance(time.Second)
				last := appendText(t, b.Store, thA, chatrelay.Hermes, "answer")
				infos, err := b.Store.Threads(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "order", []string{infos[0].Thread, infos[1].Thread}, []string{thA, thB})
				assert.Equal(t, "summary", infos[0], store.ThreadInfo{Thread: thA, Messages: 2, LastAuthor: chatrelay.Hermes, LastEpoch: last.Epoch, Rev: last.Epoch, Awaiting: false})
				assert.Equal(t, "awaiting", infos[1].Awaiting, true)
			}},
			{"the feed: ready first, then every append of another process once, in order", Options{}, func(t *testing.T, b *Backend, _ *testclock.Clock) {
				feed := follow(t, b.Store)
				other := b.Another(t, Options{}) // another process, or another node
				var want []int64
				for i := range 20 {
					th := []string{thA, thB}[i%2]
					want = append(want, appendText(t, other.Store, th, chatrelay.Hermes, "from elsewhere").Epoch)
				}
				assert.Eventually(t, 10*time.Second, "every append on the feed", func() bool { return len(feed.messages()) >= len(want) })
				feed.stop(t)
				assert.True(t, feed.readyFirst, "a batch came before Ready")
				perThread := map[string][]int64{}
				for _, bt := range feed.batches() {
					assert.True(t, !bt.Reset, "a reset batch for %s", bt.Thread)
					for _, m := range bt.Messages {
						perThread[bt.Thread] = append(perThread[bt.Thread], m.Epoch)
					}
				}
				for i, th := range []string{thA, thB} {
					var w []int64
					for j := i; j < len(want); j += 2 {
						w = append(w, want[j])
					}
					assert.Equal(t, "feed of "+th, perThread[th], w)
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clk := testclock.New(t0)
				tc.opt.Now = clk.Now
				tc.run(t, Open(t, backend, tc.opt), clk)
			})
		}
	})
}

// TestOpenBySpec: store.Open opens each backend from its spec, with the
// capabilities it offers: a shared backend counts the limits across nodes
// and keeps one ticket key for all; a folder leaves the limits to the
// server's memory and keeps its key in the folder, the same for every
// process.
func TestOpenBySpec(t *testing.T) {
	ctx := context.Background()
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		a, err := store.Open(ctx, "file:"+dir, store.Options{NoFsync: true})
		assert.Success(t, err)
		defer a.Close()
		b, err := store.Open(ctx, dir, store.Options{NoFsync: true}) // a bare folder is a file: spec
		assert.Success(t, err)
		defer b.Close()
		assert.True(t, a.Limiter == nil && a.Streams == nil, "the file store offers shared limiters")
		ka, err := a.TicketKey(ctx)
		assert.Success(t, err)
		kb, err := b.TicketKey(ctx)
		assert.Success(t, err)
		assert.True(t, len(ka) >= 32 && string(ka) == string(kb), "two opens of a folder disagree on the ticket key")
		appendText(t, a.Store, thA, "", "hello")
		assert.Equal(t, "seen by the other", len(since(t, b.Store, thA, 0, 0).Messages), 1)
		assert.Equal(t, "where", a.Where, "file:"+dir)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := SharedServer(t)
		opt := store.Options{KeyPrefix: NewPrefix(), Windows: chatrelay.Windows{PerThread: 1, PerIP: 5}}
		a, err := store.Open(ctx, srv.URL(), opt)
		assert.Success(t, err)
		defer a.Close()
		b, err := store.Open(ctx, srv.URL(), opt)
		assert.Success(t, err)
		defer b.Close()
		assert.True(t, a.Limiter != nil && a.Streams != nil, "Redis offers no shared limiters")
		_, err = a.Limiter.Take(ctx, thA, "192.0.2.1")
		assert.Success(t, err)
		_, err = b.Limiter.Take(ctx, thA, "192.0.2.2")
		assert.Code(t, err, chatrelay.RateLimited) // one post per thread, counted across nodes
		ka, err := a.TicketKey(ctx)
		assert.Success(t, err)
		kb, err := b.TicketKey(ctx)
		assert.Success(t, err)
		assert.True(t, string(ka) == string(kb), "two nodes disagree on the ticket key")
	})
	for _, name := range []string{RedisCluster, RedisShards} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec := SharedCluster(t).URL()
			if name == RedisShards {
				spec = SharedServer(t).URL() + "," + secondServer(t).URL()
			}
			opt := store.Options{KeyPrefix: NewPrefix(), Windows: chatrelay.Windows{PerThread: 1, PerIP: 5}, Log: logger(Options{})}
			a, err := store.Open(ctx, spec, opt)
			assert.Success(t, err)
			defer a.Close()
			b, err := store.Open(ctx, spec, opt)
			assert.Success(t, err)
			defer b.Close()
			assert.True(t, a.Limiter != nil && a.Streams != nil && a.TicketKeyShared, "shards offer no shared limiters or ticket key")
			_, err = a.Limiter.Take(ctx, thA, "192.0.2.1")
			assert.Success(t, err)
			_, err = b.Limiter.Take(ctx, thA, "192.0.2.2")
			assert.Code(t, err, chatrelay.RateLimited) // one post per thread, counted across nodes
			ka, err := a.TicketKey(ctx)
			assert.Success(t, err)
			kb, err := b.TicketKey(ctx)
			assert.Success(t, err)
			assert.True(t, len(ka) >= 32 && string(ka) == string(kb), "two nodes disagree on the ticket key")
			appendText(t, a.Store, thA, "", "hello")
			appendText(t, a.Store, thB, "", "hello")
			infos, err := b.Threads(ctx)
			assert.Success(t, err)
			assert.Equal(t, "threads seen by the other node", len(infos), 2)
			assert.Equal(t, "where", a.Where != "" && !strings.Contains(a.Where, "@"), true)
		})
	}
	t.Run("unknown scheme", func(t *testing.T) {
		t.Parallel()
		_, err := store.Open(ctx, "postgres://localhost/chat", store.Options{})
		var ce *store.ConfigError
		assert.True(t, errors.As(err, &ce) && strings.Contains(err.Error(), "file, redis, redis+cluster, rediss, rediss+cluster"), "error %v", err)
	})
}
