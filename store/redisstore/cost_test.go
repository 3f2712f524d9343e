package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// commandCalls counts the commands Redis ran since the last CONFIG
// RESETSTAT, by name (INFO commandstats: a script's own commands are
// counted too), leaving out the calls of the counting itself.
func commandCalls(t *testing.T, s *Store) map[string]int {
	t.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok || strings.HasPrefix(name, "config") || name == "info" {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[name], _ = strconv.Atoi(n)
	}
	return calls
}

// TestAppendCommands: what Redis runs for a plain post to a thread under
// its retention, the case of nearly every post: the append script and,
// inside it, the read of meta, the message, meta's changed fields, the
// index and the feed. It reads no length (XLEN: meta bounds it) and writes
// meta once. The script is the library's function (an FCALL), or an
// EVALSHA on a Redis without functions (evalOnly stands in for one).
func TestAppendCommands(t *testing.T) {
	t.Parallel()
	for _, call := range []string{"fcall", "evalsha"} {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			appendCommands(t, call)
		})
	}
}

func appendCommands(t *testing.T, call string) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	s := openStore(t, srv, Options{Now: clk.Now, Retention: chatrelay.Retention{Messages: 50}, evalOnly: call == "evalsha"})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "first"}))
	if err := s.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const posts = 20
	for i := range posts {
		clk.Advance(300 * time.Millisecond) // some in the same second, some not
		must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: fmt.Sprint("post ", i)}))
	}
	got := commandCalls(t, s)
	want := map[string]int{call: posts, "hmget": posts, "xadd": posts, "hset": posts, "zadd": posts, "publish": posts}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d posts ran %v, want %v", posts, got, want)
	}
	// A plain post sends the 14 keys an append may touch and the script's
	// 9 arguments (the node's settings in one), not those it leaves empty,
	// and is answered its JSON as one string, not in a table; counted in
	// the rate windows, 2 keys and 1 argument more: each one is work for
	// Redis (docs/performance-log.md).
	var args []int
	var answers []string
	s.rdb.AddHook(argsHook{script: call, args: &args, answers: &answers})
	e := must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "one more"}))
	rl := NewRateLimiter(s, chatrelay.Windows{})
	if _, done, err := s.AppendLimited(ctx, rl, th, "192.0.2.7", store.NewMessage{Text: "rated"}); !done || err != nil {
		t.Fatalf("AppendLimited: done %v, %v", done, err)
	}
	if want := []int{14, 9, 16, 10}; fmt.Sprint(args) != fmt.Sprint(want) {
		t.Fatalf("a plain post's script then a rated one's had %v keys and arguments, want %v", args, want)
	}
	if len(answers) != 2 || !strings.HasPrefix(answers[0], `string {"id":"`+e.ID+`"`) {
		t.Fatalf("a plain post's script answered %q, want its message's JSON as a string", answers)
	}
}

// argsHook notes the keys and the arguments of each call of a script
// (cmd: fcall or evalsha), as pairs, and its answers' Go type and value.
type argsHook struct {
	script  string
	args    *[]int
	answers *[]string
}

func (h argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		err := next(ctx, cmd)
		h.answer(cmd)
		return err
	}
}

func (h argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.note(cmd)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.answer(cmd)
		}
		return err
	}
}

func (h argsHook) note(cmd redis.Cmder) {
	a := cmd.Args()
	if len(a) < 3 || fmt.Sprint(a[0]) != h.script {
		return
	}
	keys, _ := strconv.Atoi(fmt.Sprint(a[2]))
	*h.args = append(*h.args, keys, len(a)-3-keys)
}

func (h argsHook) answer(cmd redis.Cmder) {
	c, ok := cmd.(*redis.Cmd)
	if a := cmd.Args(); h.answers == nil || !ok || len(a) < 3 || fmt.Sprint(a[0]) != h.script {
		return
	}
	*h.answers = append(*h.answers, fmt.Sprintf("%T %v", c.Val(), c.Val()))
}

// TestRetentionByCountAfterDrops: meta's bound of the log's length stays
// above it when the sweep drops messages, and retention by count keeps
// exactly the newest keep once appends bring the log past it.
func TestRetentionByCountAfterDrops(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400123))
	s := openStore(t, srv, Options{Now: clk.Now, Retention: chatrelay.Retention{Messages: 5, Age: time.Hour}})
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"
	var es []store.Entry
	post := func() {
		t.Helper()
		es = append(es, must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: fmt.Sprint("post ", len(es))})))
	}
	for range 3 {
		post()
	}
	clk.Advance(40 * time.Minute)
	post()
	post()
	clk.Advance(30 * time.Minute) // the first three are past the hour
	if st := must[store.SweepStats](t)(s.Sweep(ctx)); st.Dropped != 3 {
		t.Fatalf("sweep dropped %d, want 3", st.Dropped)
	}
	for range 4 {
		post()
	}
	p := must[store.Page](t)(s.Since(ctx, th, 0, 0))
	var got []string
	for _, m := range p.Messages {
		got = append(got, m.ID)
	}
	var want []string
	for _, e := range es[len(es)-5:] {
		want = append(want, e.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kept %v, want the newest five %v", got, want)
	}
}

// TestRenewalCommandsPerSet: a renewal extends every lease of the node
// with two commands per set (its ZADD and its expiry), not per stream:
// 600 streams over three threads from one address (and 20 participants'
// streams) renew in a handful of commands, more than one script's worth
// of members, and every lease is renewed.
func TestRenewalCommandsPerSet(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	l := NewStreamLimiter(s, chatrelay.StreamLimits{PerThread: 1000, PerIP: 1000}, time.Minute)
	ctx := t.Context()
	threads := []string{"0000000000000001", "0000000000000002", "0000000000000003"}
	for i := range 600 {
		holder := chatrelay.OwnerStream
		if i%30 == 0 {
			holder = chatrelay.ParticipantStream
		}
		must[func()](t)(l.Acquire(ctx, threads[i%3], "127.0.0.2", holder))
	}
	sets := []string{s.prefix + "{sl}:i:127.0.0.2"}
	for _, th := range threads {
		sets = append(sets, s.prefix+"{sl}:t:"+th, s.prefix+"{sl}:p:"+th)
	}
	// Every lease as if about to expire, then one renewal.
	for _, k := range sets {
		for _, m := range s.rdb.ZRange(ctx, k, 0, -1).Val() {
			s.rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: m})
		}
	}
	if err := s.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l.renew(ctx)
	calls := commandCalls(t, s)
	for _, k := range sets {
		if n := s.rdb.ZCount(ctx, k, "-inf", "1").Val(); n != 0 {
			t.Fatalf("%s: %d leases not renewed", k, n)
		}
	}
	// 7 sets, 1 220 members: three scripts, a set at most split at each
	// of the two boundaries.
	if calls["zadd"] > 9 || calls["pexpire"] > 9 {
		t.Fatalf("one renewal of 600 streams in 7 sets ran %v", calls)
	}
}

// TestRatedAppendKeysAllocateNoMore: a rated append's keys, a thread's
// keys and its two rate windows, cost no allocation more than the
// thread's keys alone (the windows are added in place). (Not parallel:
// AllocsPerRun counts every goroutine's allocations.)
func TestRatedAppendKeysAllocateNoMore(t *testing.T) {
	s := &Store{prefix: "chat:", index: "chat:threads", genKey: "chat:generation", pending: "chat:pending", gindex: "chat:grant-index", events: "chat:webhook:events", places: "chat:att-places"}
	const th = "a1b2c3d4e5f60718"
	var sink []string
	plain := testing.AllocsPerRun(200, func() { sink = s.appendKeys(th, false) })
	rated := testing.AllocsPerRun(200, func() { sink = append(s.appendKeys(th, false), "chat:{rl}:tl:x", "chat:{rl}:ip:y") })
	if rated != plain {
		t.Fatalf("a rated append's keys allocate %v times, a thread's keys %v", rated, plain)
	}
	_ = sink
}

// TestPostPathAllocations: what a post's path in the store allocates, by
// construction, at every post (docs/performance-log.md, "Redis: a post's
// allocations on the server's side"): its stored message read back, from
// the script's answer and again from the feed, in one allocation for both
// encodings (v1 and v2); its author and text as JSON for the script in
// one; its rate windows' take in three (the take, both keys, its id).
// (Not parallel: AllocsPerRun counts every goroutine's allocations.)
func TestPostPathAllocations(t *testing.T) {
	if raceOn {
		t.Skip("the race detector moves more values to the heap")
	}
	js := string(chatrelay.MarshalMessage(chatrelay.Message{ID: "MSG-20261023-180000-a1b2c3", Epoch: 1792778400123,
		TS: "2026-10-23T18:00:00+00:00", Author: "agent", Text: "a message of a typical length, about sixty characters long."}))
	var e store.Entry
	if n := testing.AllocsPerRun(200, func() { e, _ = parseEntry(js) }); n != 1 {
		t.Errorf("parseEntry allocates %v times, want 1", n)
	}
	if string(e.JSON) != js || e.Rev != e.Epoch {
		t.Fatalf("parseEntry(%s) = %+v", js, e)
	}
	var a, b string
	if n := testing.AllocsPerRun(200, func() { a, b = jsonStrings("agent", "a plain text") }); n != 1 {
		t.Errorf("jsonStrings allocates %v times, want 1", n)
	}
	if a != `"agent"` || b != `"a plain text"` {
		t.Fatalf("jsonStrings = %s, %s", a, b)
	}
	l := NewRateLimiter(&Store{limits: "chat:"}, chatrelay.Windows{})
	var rt *rateTake
	if n := testing.AllocsPerRun(200, func() { rt = l.take("a1b2c3d4e5f60718", "127.0.0.2") }); n != 3 {
		t.Errorf("take allocates %v times, want 3", n)
	}
	if rt.w[0].key != "chat:{rl}:tl:a1b2c3d4e5f60718" || rt.w[1].key != "chat:{rl}:il:127.0.0.2" || len(rt.w) != 2 {
		t.Fatalf("take's windows = %+v", rt.w)
	}
}
