package redisstore

import (
	"reflect"

	"github.com/chatrelay/chatrelay"

	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

var idRE = regexp.MustCompile(`^MSG-\d{8}-\d{6}-[0-9a-f]{6}$`)

// checkEntry checks what only the store decides: the id's form and second,
// ts, and that JSON is exactly chatrelay.MarshalMessage of the message.
func checkEntry(t *testing.T, e store.Entry) {
	t.Helper()
	at := time.UnixMilli(e.Epoch).UTC()
	if !idRE.MatchString(e.ID) || e.ID[4:19] != at.Format("20060102-150405") {
		t.Fatalf("id %q for epoch %d", e.ID, e.Epoch)
	}
	if want := at.Format("2006-01-02T15:04:05+00:00"); e.TS != want {
		t.Fatalf("ts %q for epoch %d, want %q", e.TS, e.Epoch, want)
	}
	if want := chatrelay.MarshalMessage(e.Message); !bytes.Equal(e.JSON, want) {
		t.Fatalf("JSON\n%s\nwant\n%s", e.JSON, want)
	}
}

// sameMessages compares two stores' messages, ids by their second only
// (the 6 hex are random).
func sameMessages(t *testing.T, what string, got, want []store.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, file store has %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i].Message, want[i].Message
		g.ID, w.ID = g.ID[:19], w.ID[:19]
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: message %d\n%+v\nfile store:\n%+v", what, i, g, w)
		}
	}
}

// TestSameAsFileStore runs one random history of appends, clock moves,
// sweeps and reads against the file store and the Redis store with the
// same clock, and requires the same answers.
func TestSameAsFileStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.Date(2026, 10, 23, 18, 39, 59, 998e6, time.UTC))
	ret := chatrelay.Retention{Messages: 5, Age: time.Hour}
	fs, err := store.OpenFile(t.TempDir(), store.FileOptions{Retention: ret, MaxThreads: 3, NoFsync: true, Now: clk.Now, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	rs := openStore(t, srv, Options{Retention: ret, MaxThreads: 3, Now: clk.Now})
	ctx := t.Context()

	threads := []string{"a1b2c3d4e5f60718", "0000000000000001", "ffffffffffffffff", "0123456789abcdef"}
	texts := []string{"hello", "<b>&amp;</b> \"quoted\" \\ back", "line\nbreak\ttab\r", "\u2028\u2029 é ✓ 🙂", "\x01\x1f ctl", "  padded  "}
	authors := []chatrelay.Author{"", chatrelay.Operator, chatrelay.Agent, chatrelay.Hermes}
	rng := rand.New(rand.NewPCG(1, 2))

	compare := func(step int) {
		t.Helper()
		for _, th := range threads {
			fp := must[store.Page](t)(fs.Since(ctx, th, 0, 0))
			sinces := []int64{0, 1, fp.Cursor, fp.Cursor + 5}
			for _, m := range fp.Messages {
				sinces = append(sinces, m.Epoch-1, m.Epoch)
			}
			if len(fp.Messages) > 0 {
				sinces = append(sinces, fp.Messages[0].Epoch-1000)
			}
			for _, since := range sinces {
				for _, limit := range []int{0, 2, 50} {
					what := fmt.Sprintf("step %d thread %s since %d limit %d", step, th, since, limit)
					want := must[store.Page](t)(fs.Since(ctx, th, since, limit))
					got := must[store.Page](t)(rs.Since(ctx, th, since, limit))
					if got.Thread != want.Thread || got.Cursor != want.Cursor || got.Awaiting != want.Awaiting || got.Reset != want.Reset {
						t.Fatalf("%s: page %+v, file store %+v", what, got, want)
					}
					sameMessages(t, what, got.Messages, want.Messages)
					for _, e := range got.Messages {
						checkEntry(t, e)
					}
				}
			}
		}
		// Threads with the same newest epoch may come in either order.
		order := func(a, b store.ThreadInfo) int {
			return cmp.Or(cmp.Compare(b.LastEpoch, a.LastEpoch), strings.Compare(a.Thread, b.Thread))
		}
		fi := must[[]store.ThreadInfo](t)(fs.Threads(ctx))
		ri := must[[]store.ThreadInfo](t)(rs.Threads(ctx))
		slices.SortFunc(fi, order)
		slices.SortFunc(ri, order)
		if fmt.Sprint(fi) != fmt.Sprint(ri) {
			t.Fatalf("step %d: Threads %v, file store %v", step, ri, fi)
		}
	}

	for step := range 400 {
		th := threads[rng.IntN(len(threads))]
		switch r := rng.IntN(100); {
		case r < 8: // the clock goes back: epochs still increase
			clk.Advance(-time.Duration(rng.IntN(3000)) * time.Millisecond)
		case r < 12: // past the retention age
			clk.Advance(time.Duration(30+rng.IntN(60)) * time.Minute)
		case r < 15:
			clk.Advance(10 * time.Minute)
			want := must[store.SweepStats](t)(fs.Sweep(ctx))
			got := must[store.SweepStats](t)(rs.Sweep(ctx))
			if got != want {
				t.Fatalf("step %d: Sweep %+v, file store %+v", step, got, want)
			}
		default:
			if rng.IntN(3) == 0 {
				clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
			m := store.NewMessage{Author: authors[rng.IntN(len(authors))], Text: texts[rng.IntN(len(texts))], MustExist: rng.IntN(10) == 0}
			we, werr := fs.Append(ctx, th, m)
			ge, gerr := rs.Append(ctx, th, m)
			if chatrelay.CodeOf(gerr) != chatrelay.CodeOf(werr) {
				t.Fatalf("step %d: Append error %v, file store %v", step, gerr, werr)
			}
			if werr != nil {
				continue
			}
			checkEntry(t, ge)
			sameMessages(t, fmt.Sprintf("step %d append", step), []store.Entry{ge}, []store.Entry{we})
			// What Append returned is what is stored.
			p := must[store.Page](t)(rs.Since(ctx, th, ge.Epoch-1, 0))
			if len(p.Messages) != 1 || !bytes.Equal(p.Messages[0].JSON, ge.JSON) {
				t.Fatalf("step %d: stored %+v, Append returned %s", step, p.Messages, ge.JSON)
			}
		}
		if step%10 == 0 || step == 399 {
			compare(step)
		}
	}
}

// TestAppendBasics pins the contract's examples and the errors.
func TestAppendBasics(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	s := openStore(t, srv, Options{Now: clk.Now})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"

	p := must[store.Page](t)(s.Since(ctx, th, 0, 50))
	if p.Thread != th || len(p.Messages) != 0 || p.Cursor != 0 || p.Awaiting || p.Reset {
		t.Fatalf("empty thread: %+v", p)
	}
	if n := s.rdb.Exists(ctx, append(s.keysOf(th), s.index)...).Val(); n != 0 {
		t.Fatalf("a read created %d keys", n)
	}

	e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "hi"}))
	// (The contract's example pairs this epoch with 18:40:00; it is 18:00:00.123 UTC.)
	if e.Epoch != 1792778400123 || e.TS != "2026-10-23T18:00:00+00:00" || e.Author != chatrelay.Operator ||
		!strings.HasPrefix(e.ID, "MSG-20261023-180000-") {
		t.Fatalf("first message %+v", e)
	}
	checkEntry(t, e)
	// The same millisecond: newest + 1; ids stay unique within the second.
	ids := map[string]bool{e.ID: true}
	for i := range 300 {
		e2 := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Author: chatrelay.Hermes, Text: "again"}))
		if e2.Epoch != e.Epoch+1 {
			t.Fatalf("append %d: epoch %d after %d", i, e2.Epoch, e.Epoch)
		}
		if ids[e2.ID] && e2.Epoch/1000 == e.Epoch/1000 {
			t.Fatalf("id %s reused", e2.ID)
		}
		ids[e2.ID] = true
		e = e2
	}
	p = must[store.Page](t)(s.Since(ctx, th, 0, 50))
	if len(p.Messages) != 50 || p.Cursor != e.Epoch || p.Awaiting || p.Messages[49].Epoch != e.Epoch {
		t.Fatalf("newest 50: %d messages, cursor %d awaiting %v", len(p.Messages), p.Cursor, p.Awaiting)
	}
	// 301 appended, 200 kept.
	p = must[store.Page](t)(s.Since(ctx, th, 0, 0))
	if len(p.Messages) != 200 {
		t.Fatalf("retained %d, want 200", len(p.Messages))
	}
	if p = must[store.Page](t)(s.Since(ctx, th, 1792778400123, 0)); !p.Reset || len(p.Messages) != 200 {
		t.Fatalf("since the first (dropped) message: reset %v, %d messages", p.Reset, len(p.Messages))
	}

	if p = must[store.Page](t)(s.Since(ctx, th, math.MaxInt64, 0)); len(p.Messages) != 0 || p.Cursor != e.Epoch || p.Reset {
		t.Fatalf("since MaxInt64: %+v", p)
	}

	const other = "0000000000000002"
	_, err := s.Append(ctx, other, store.NewMessage{Text: "reply", Author: chatrelay.Hermes, MustExist: true})
	wantCode(t, err, chatrelay.NotFound)
	_, err = s.Append(ctx, "NOT-A-THREAD", store.NewMessage{Text: "x"})
	wantCode(t, err, chatrelay.InvalidThread)
	_, err = s.Since(ctx, "abc", 0, 0)
	wantCode(t, err, chatrelay.InvalidThread)
	_, err = s.Append(ctx, th, store.NewMessage{Text: " \n\t"})
	wantCode(t, err, chatrelay.InvalidText)
	_, err = s.Append(ctx, th, store.NewMessage{Text: "bad \xff"})
	wantCode(t, err, chatrelay.InvalidText)
	_, err = s.Append(ctx, th, store.NewMessage{Text: strings.Repeat("é", chatrelay.MaxText+1)})
	wantCode(t, err, chatrelay.TextTooLong)
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: strings.Repeat("é", chatrelay.MaxText)}))
}

// TestDates checks the script's calendar against Go's for many instants.
func TestDates(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.Time{})
	s := openStore(t, srv, Options{Now: clk.Now, MaxThreads: 1 << 20, Retention: chatrelay.Retention{Age: 1 << 62}})
	ctx := t.Context()
	instants := []time.Time{
		time.Date(1970, 1, 1, 0, 0, 1, 0, time.UTC),
		time.Date(1972, 2, 29, 23, 59, 59, 999e6, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 0, time.UTC),
		time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 2, 28, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2400, 2, 29, 1, 2, 3, 4e6, time.UTC),
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		instants = append(instants, time.UnixMilli(1000+rng.Int64N(4102444800000)))
	}
	for i, at := range instants {
		clk.Set(at)
		th := fmt.Sprintf("%016x", i+1)
		e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "t"}))
		if e.Epoch != at.UnixMilli() {
			t.Fatalf("epoch %d, want %d", e.Epoch, at.UnixMilli())
		}
		checkEntry(t, e)
	}
}

// TestThreadLimitAcrossNodes races thread creations on two nodes: exactly
// MaxThreads threads are created, the rest get 507 thread_limit, existing
// threads keep working, and a swept thread frees its place.
func TestThreadLimitAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	opt := Options{MaxThreads: 7, Now: clk.Now}
	a, b := openStore(t, srv, opt), openStore(t, srv, opt)
	ctx := t.Context()

	var mu sync.Mutex
	created := map[string]*Store{}
	limited := 0
	var wg sync.WaitGroup
	for i := range 40 {
		node := a
		if i%2 == 1 {
			node = b
		}
		th := fmt.Sprintf("%016x", 0xabc000+i)
		wg.Go(func() {
			_, err := node.Append(ctx, th, store.NewMessage{Text: "first"})
			mu.Lock()
			defer mu.Unlock()
			switch chatrelay.CodeOf(err) {
			case "":
				created[th] = node
			case chatrelay.ThreadLimit:
				limited++
			default:
				t.Errorf("append: %v", err)
			}
		})
	}
	wg.Wait()
	if len(created) != 7 || limited != 33 {
		t.Fatalf("created %d threads, %d refused; want 7 and 33", len(created), limited)
	}
	for th := range created { // existing threads keep working on every node
		for _, node := range []*Store{a, b} {
			must[store.Entry](t)(node.Append(ctx, th, store.NewMessage{Text: "more"}))
		}
	}
	_, err := b.Append(ctx, "fedcba9876543210", store.NewMessage{Text: "new"})
	wantCode(t, err, chatrelay.ThreadLimit)

	// One thread's messages expire; the sweep removes it; a new thread fits.
	var old string
	for th := range created {
		old = th
		break
	}
	clk.Advance(31 * 24 * time.Hour)
	for th := range created {
		if th != old {
			must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "recent"}))
		}
	}
	st := must[store.SweepStats](t)(b.Sweep(ctx))
	if st.ThreadsRemoved != 1 || st.Threads != 7 {
		t.Fatalf("sweep %+v", st)
	}
	must[store.Entry](t)(a.Append(ctx, "fedcba9876543210", store.NewMessage{Text: "new"}))
	_, err = b.Append(ctx, old, store.NewMessage{Text: "back"})
	wantCode(t, err, chatrelay.ThreadLimit)
}

// TestSweepFromTwoNodes sweeps the same threads from two nodes at once:
// each message is dropped once, each expired thread removed once.
func TestSweepFromTwoNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	ret := chatrelay.Retention{Messages: 10, Age: time.Hour}
	a := openStore(t, srv, Options{Retention: ret, Now: clk.Now})
	b := openStore(t, srv, Options{Retention: ret, Now: clk.Now})
	ctx := t.Context()
	const n = 30
	for i := range n {
		th := fmt.Sprintf("%016x", i+1)
		for range 4 {
			must[store.Entry](t)(a.Append(ctx, th, store.NewMessage{Text: "old"}))
		}
	}
	clk.Advance(50 * time.Minute)
	keep := map[string]int64{}
	for i := range n / 2 { // half the threads get a message that stays
		th := fmt.Sprintf("%016x", i+1)
		keep[th] = must[store.Entry](t)(b.Append(ctx, th, store.NewMessage{Text: "new"})).Epoch
	}
	clk.Advance(20 * time.Minute)

	var wg sync.WaitGroup
	stats := make([]store.SweepStats, 2)
	for i, node := range []*Store{a, b} {
		wg.Go(func() {
			st, err := node.Sweep(ctx)
			if err != nil {
				t.Error(err)
			}
			stats[i] = st
		})
	}
	wg.Wait()
	if d := stats[0].Dropped + stats[1].Dropped; d != 4*n {
		t.Fatalf("dropped %d in all (%+v), want %d", d, stats, 4*n)
	}
	if r := stats[0].ThreadsRemoved + stats[1].ThreadsRemoved; r != n/2 {
		t.Fatalf("removed %d threads in all (%+v), want %d", r, stats, n/2)
	}
	infos := must[[]store.ThreadInfo](t)(a.Threads(ctx))
	if len(infos) != n/2 {
		t.Fatalf("%d threads left, want %d", len(infos), n/2)
	}
	for _, info := range infos {
		if info.Messages != 1 || info.LastEpoch != keep[info.Thread] {
			t.Fatalf("thread left: %+v", info)
		}
		p := must[store.Page](t)(b.Since(ctx, info.Thread, 1792778400000, 0))
		if !p.Reset || len(p.Messages) != 1 {
			t.Fatalf("since an expired message: %+v", p)
		}
	}
	for i := n / 2; i < n; i++ {
		th := fmt.Sprintf("%016x", i+1)
		if k := a.rdb.Exists(ctx, a.keysOf(th)...).Val(); k != 0 {
			t.Fatalf("removed thread %s keeps %d keys", th, k)
		}
	}
}

// TestPrefixes keeps two deployments on one Redis apart.
func TestPrefixes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	a := openStore(t, srv, Options{})
	b := openStore(t, srv, Options{Prefix: "other:"})
	ctx := t.Context()
	must[store.Entry](t)(a.Append(ctx, "a1b2c3d4e5f60718", store.NewMessage{Text: "x"}))
	if p := must[store.Page](t)(b.Since(ctx, "a1b2c3d4e5f60718", 0, 0)); len(p.Messages) != 0 {
		t.Fatalf("other prefix sees %+v", p)
	}
	// The log, the index and the generation; meta comes with trimming. The
	// other prefix's read made its own generation.
	keys := a.rdb.Keys(ctx, "*").Val()
	slices.Sort(keys)
	want := []string{"chatrelay:generation", "chatrelay:threads", "chatrelay:{a1b2c3d4e5f60718}:log", "other:generation"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
}

// TestUnavailable: with Redis gone every operation answers
// store_unavailable (retryable, with a wait), and Open does too.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	rl := NewRateLimiter(s, chatrelay.Windows{})
	sl := NewStreamLimiter(s, chatrelay.StreamLimits{}, 0)
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "x"}))
	srv.Kill()

	check := func(what string, err error) {
		t.Helper()
		he := wantCode(t, err, chatrelay.StoreUnavailable)
		if he.Retry <= 0 || !he.Code.Retryable() {
			t.Fatalf("%s: %+v", what, he)
		}
	}
	_, err := s.Append(ctx, th, store.NewMessage{Text: "y"})
	check("append", err)
	_, err = s.Since(ctx, th, 0, 0)
	check("since", err)
	_, err = s.Threads(ctx)
	check("threads", err)
	_, err = s.Sweep(ctx)
	check("sweep", err)
	_, err = rl.Take(ctx, th, "192.0.2.1")
	check("take", err)
	_, err = sl.Acquire(ctx, th, "192.0.2.1")
	check("acquire", err)
	check("ping", s.Ping(ctx))
	_, err = Open(ctx, srv.URL(), Options{})
	check("open", err)
	if _, err = Open(ctx, "http://127.0.0.1:1", Options{}); err == nil {
		t.Fatal("Open accepted an http URL")
	}

	srv.Restart(t)
	eventually(t, 10*time.Second, "append after the restart", func() bool {
		_, err := s.Append(ctx, th, store.NewMessage{Text: "z"})
		return err == nil
	})
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	ctx := context.Background()
	s, err := Open(ctx, "redis://"+srv.Addr()+"/3?client_name=node1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if db := s.rdb.Options().DB; db != 3 {
		t.Fatalf("db %d", db)
	}
	// rediss:// is accepted (a TLS client); this server speaks no TLS.
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := Open(tctx, "rediss://"+srv.Addr()+"/0?dial_timeout=1s", Options{}); chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
		t.Fatalf("rediss to a plain server: %v", err)
	}
}

// TestIDSuffixes drives the script's choice of id suffix with chosen
// candidates: a taken suffix is skipped, all taken is a collision, and the
// suffixes of the second are found again when their hash is gone.
func TestIDSuffixes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400500))
	s := openStore(t, srv, Options{Now: clk.Now})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	m := store.NewMessage{Text: "x", Author: chatrelay.Operator}
	suffix := func(cands ...string) string {
		t.Helper()
		res := must[[]string](t)(s.runAppend(ctx, th, &appendReq{m: m}, cands))
		if res[0] != "ok" {
			return res[0]
		}
		e := must[store.Entry](t)(parseEntry(res[3]))
		checkEntry(t, e)
		return e.ID[len(e.ID)-6:]
	}
	steps := []struct {
		name  string
		cands []string
		want  string
	}{
		{"first of its second", []string{"aaaaaa", "bbbbbb"}, "aaaaaa"},
		{"taken is skipped", []string{"aaaaaa", "bbbbbb"}, "bbbbbb"},
		{"all taken", []string{"aaaaaa", "bbbbbb"}, "collision"},
		{"a free one", []string{"bbbbbb", "cccccc", "aaaaaa"}, "cccccc"},
	}
	for _, st := range steps {
		if got := suffix(st.cands...); got != st.want {
			t.Fatalf("%s: %s, want %s", st.name, got, st.want)
		}
	}
	s.rdb.Del(ctx, s.idsKey(th))
	if got := suffix("cccccc", "aaaaaa", "dddddd"); got != "dddddd" {
		t.Fatalf("after the hash expired: %s, want dddddd", got)
	}
	clk.Advance(time.Second) // a new second: every suffix is free again
	if got := suffix("aaaaaa"); got != "aaaaaa" {
		t.Fatalf("next second: %s", got)
	}
	if got := suffix("aaaaaa", "eeeeee"); got != "eeeeee" {
		t.Fatalf("next second, second message: %s", got)
	}
}

// TestParseEntry: the fast reader of the stored layout agrees with
// encoding/json, and other layouts still parse (through encoding/json).
func TestParseEntry(t *testing.T) {
	t.Parallel()
	texts := []string{"plain", `"quoted" \\ back\\`, "line\nbreak\ttab\r", "\u2028\u2029 é ✓ 🙂", "\x01\x1f\x7f", "<b>&amp;</b>", `\"`, "}", `","text":"`}
	for i, text := range texts {
		m := chatrelay.Message{ID: "MSG-20261023-180000-a1b2c3", Epoch: 1792778400123 + int64(i), TS: "2026-10-23T18:00:00+00:00", Author: chatrelay.Author(texts[(i+1)%len(texts)]), Text: text}
		js := string(chatrelay.MarshalMessage(m))
		fast, ok := parseFast(js)
		if !ok || !reflect.DeepEqual(fast, m) {
			t.Fatalf("parseFast(%s) = %+v, %v", js, fast, ok)
		}
		// A message read from its v1 JSON has no v2 state: its rev is its
		// epoch, and its v2 object is the one MarshalMessageV2 makes.
		want := m
		want.Rev = m.Epoch
		for _, parse := range []func(string) (store.Entry, error){parseEntry, entryOfJSON} {
			e, err := parse(js)
			if err != nil || !reflect.DeepEqual(e.Message, want) || string(e.JSON) != js || string(e.JSON2) != string(chatrelay.MarshalMessageV2(m)) {
				t.Fatalf("parse(%s) = %+v, %v", js, e, err)
			}
		}
	}
	other := `{"text":"x","author":"agent","ts":"2026-10-23T18:00:00+00:00","epoch":5,"id":"MSG-x"}`
	if _, ok := parseFast(other); ok {
		t.Fatal("parseFast accepted another layout")
	}
	if e, err := parseEntry(other); err != nil || e.Text != "x" || e.Epoch != 5 {
		t.Fatalf("parseEntry(other layout) = %+v, %v", e, err)
	}
	for _, bad := range []string{"", "{", `{"id":"x"}`, `{"id":"MSG","epoch":1,"ts":"t","author":"a","text":"t"`, "null",
		`{"id":"MSG","epoch":5,"ts":"t","author":"a","text":"t","rev":4}`} {
		if _, err := entryOfJSON(bad); err == nil {
			t.Fatalf("entryOfJSON(%q) accepted", bad)
		}
	}
}

// TestV2Encoding: what the scripts store for a message with v2 state (the
// v2 object split around its rev, with the rev put in by the script) is
// byte for byte chatrelay.MarshalMessageV2, and reads back as the message.
func TestV2Encoding(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1792778400123)
	ask := chatrelay.Ask{Type: chatrelay.Input, Prompt: "Which <branch>?", Choices: []chatrelay.Choice{{Value: "main", Label: "Main \"branch\""}}, Timeout: time.Minute}
	answered := ask.Interaction(now)
	answered.State, answered.Answer, answered.AnsweredBy, answered.AnsweredAt = chatrelay.Answered, &chatrelay.Answer{Value: "main"}, chatrelay.Operator, now.UnixMilli()+5
	base := chatrelay.Message{ID: "MSG-20261023-180000-a1b2c3", Epoch: now.UnixMilli(), TS: "2026-10-23T18:00:00+00:00", Author: chatrelay.Hermes, Text: "line\nbreak & <b>"}
	for _, m := range []chatrelay.Message{
		{AuthorName: "Alex \u2028", ClientID: "tab-1:2"},
		{Interaction: ask.Interaction(now)},
		{Interaction: answered, Reactions: chatrelay.Reactions{"👍": {chatrelay.Hermes, "p:p_1a2b3c4d"}, "🎉": {chatrelay.Operator}}},
		{Card: &chatrelay.Card{Title: "Build", FallbackText: "green", Blocks: []chatrelay.Block{{Type: chatrelay.CodeBlock, Text: "a\tb", Language: "go"}}}},
	} {
		m.ID, m.Epoch, m.TS, m.Author, m.Text = base.ID, base.Epoch, base.TS, base.Author, base.Text
		if !hasV2(&m) {
			t.Fatalf("hasV2(%+v) = false", m)
		}
		head, tail := splitV2(m)
		m.Rev = m.Epoch + 42
		stored := head + strconv.FormatInt(m.Rev, 10) + tail
		if want := string(chatrelay.MarshalMessageV2(m)); stored != want {
			t.Fatalf("stored\n%s\nwant\n%s", stored, want)
		}
		e, err := entryOfJSON(stored)
		if err != nil || !reflect.DeepEqual(e.Message, m) || string(e.JSON) != string(chatrelay.MarshalMessage(m)) || string(e.JSON2) != stored {
			t.Fatalf("entryOfJSON(%s) = %+v, %v", stored, e, err)
		}
	}
	if hasV2(&base) {
		t.Fatal("a plain message has v2 fields")
	}
}
