package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/redis/go-redis/v9"
)

// skewedNow is a node's wall clock, off by d.
func skewedNow(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// TestSkewedNodesShareTheRateWindows: two nodes on one store, one an hour
// ahead of the other, post to one thread whose window takes 3 posts: 3
// pass, whichever node counts them and in whichever order (the nodes
// behind first, then the one ahead, and the other way round), and every
// refusal's wait is at most the window. Through Take and through the
// append that counts the post itself (AppendLimited), on one Redis, on
// two instances (the address's window on the other shard than the
// thread's) and on a cluster.
func TestSkewedNodesShareTheRateWindows(t *testing.T) {
	t.Parallel()
	w := chatrelay.Windows{PerThread: 3, PerIP: 100, Window: 10 * time.Minute}
	// poster posts to thread from ip on node i (0 behind, 1 ahead), as
	// Take or as AppendLimited; done false: left to the two calls.
	type poster func(ctx context.Context, i int, thread, ip string) error
	check := func(t *testing.T, post poster, thread func(n int) string, ip string) {
		ctx := t.Context()
		for n, order := range [][]int{{0, 0, 0, 1, 1, 1, 0}, {1, 1, 1, 0, 0, 0, 1}} {
			th := thread(n)
			passed := 0
			for k, i := range order {
				err := post(ctx, i, th, ip)
				if err == nil {
					passed++
					continue
				}
				he := wantCode(t, err, chatrelay.RateLimited)
				if he.Retry > w.Window+time.Second {
					t.Errorf("order %v, post %d (node %d): Retry-After %s, want at most the window (%s)", order, k, i, he.Retry, w.Window)
				}
			}
			if passed != w.PerThread {
				t.Errorf("order %v (node 1 an hour ahead of node 0): %d posts passed a window of %d", order, passed, w.PerThread)
			}
		}
	}
	take := func(ls ...*RateLimiter) poster {
		return func(ctx context.Context, i int, thread, ip string) error {
			_, err := ls[i].Take(ctx, thread, ip)
			return err
		}
	}
	type appender interface {
		AppendLimited(context.Context, chatrelay.RateLimiter, string, string, store.NewMessage) (store.Entry, bool, error)
	}
	appendLimited := func(t *testing.T, as []appender, ls []*RateLimiter) poster {
		return func(ctx context.Context, i int, thread, ip string) error {
			_, done, err := as[i].AppendLimited(ctx, ls[i], thread, ip, store.NewMessage{Text: "hi"})
			if !done {
				t.Fatalf("AppendLimited left the post to the two calls")
			}
			return err
		}
	}
	thread := func(base int) func(n int) string {
		return func(n int) string { return fmt.Sprintf("%016x", base+n) }
	}

	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t, redistest.ServerOptions{})
		a := openStore(t, srv, Options{Now: skewedNow(0)})
		b := openStore(t, srv, Options{Now: skewedNow(time.Hour)})
		la, lb := NewRateLimiter(a, w), NewRateLimiter(b, w)
		check(t, take(la, lb), thread(0x7a0000), "192.0.2.1")
		check(t, appendLimited(t, []appender{a, b}, []*RateLimiter{la, lb}), thread(0x7b0000), "192.0.2.2")
	})
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		a := openSharded(t, spec, Options{Prefix: prefix, Now: skewedNow(0)})
		b := openSharded(t, spec, Options{Prefix: prefix, Now: skewedNow(time.Hour)})
		la, lb := a.NewRateLimiter(w), b.NewRateLimiter(w)
		ip := addressOnShard(a, 0)
		onShard1 := func(n int) string { return threadsOnShard(a, 1, 1, 0x7c0000+0x100*n)[0] }
		check(t, take(la, lb), onShard1, ip)
		if a.cluster == nil {
			onShard1 = func(n int) string { return threadsOnShard(a, 1, 1, 0x7d0000+0x100*n)[0] }
			check(t, appendLimited(t, []appender{a, b}, []*RateLimiter{la, lb}), onShard1, ip)
		}
	})
}

// TestRateWindowsSlideOnRedisClock: the windows on Redis's own clock
// (the nodes' clocks an hour apart): the third post in a window of 2 is
// refused with a wait of at most the window, and no less than the window
// less the time the posts took; undo takes a post out by its id (its
// entry's time is Redis's, which the node never learns), freeing its
// place; the window slides: a post passes again once the oldest counted
// has left it, no sooner than the window after it was sent.
func TestRateWindowsSlideOnRedisClock(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	const win = 1500 * time.Millisecond
	w := chatrelay.Windows{PerThread: 2, PerIP: 100, Window: win}
	a := NewRateLimiter(openStore(t, srv, Options{Now: skewedNow(time.Hour)}), w)
	b := NewRateLimiter(openStore(t, srv, Options{}), w)
	ctx := t.Context()
	const th, ip = "a1b2c3d4e5f60718", "192.0.2.7"
	key := a.s.limits + "{rl}:tl:" + th

	sent := time.Now()
	undo := must[func(bool)](t)(a.Take(ctx, th, ip))
	must[func(bool)](t)(b.Take(ctx, th, ip))
	_, err := a.Take(ctx, th, ip)
	took := time.Since(sent)
	if he := wantCode(t, err, chatrelay.RateLimited); he.Retry > win || he.Retry < win-took-time.Millisecond {
		t.Fatalf("Retry-After %s, want between %s (the window less the %s the posts took) and the window %s", he.Retry, win-took, took, win)
	}
	undo(false)
	if n := a.s.rdb.LLen(ctx, key).Val(); n != 1 {
		t.Fatalf("the window holds %d posts after an undo, want 1", n)
	}
	must[func(bool)](t)(b.Take(ctx, th, ip)) // the place the undone post held
	_, err = a.Take(ctx, th, ip)
	wantCode(t, err, chatrelay.RateLimited)

	// The oldest post counted now is b's first, sent after sent.
	assert.Eventually(t, 10*time.Second, "a post to pass once the window has slid", func() bool {
		_, err := a.Take(ctx, th, ip)
		if err != nil {
			wantCode(t, err, chatrelay.RateLimited)
		}
		return err == nil
	})
	if d := time.Since(sent); d < win-time.Millisecond {
		t.Fatalf("a post passed %s after the window's oldest was sent, before the window (%s) was over", d, win)
	}
}

// lostAnswer fails the first call that names key once Redis has run it,
// as an answer that came after the caller's deadline.
type lostAnswer struct {
	key  string
	once sync.Once
}

func (l *lostAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lostAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && slices.ContainsFunc(cmd.Args(), func(a any) bool { return argText(a) == l.key }) {
			l.once.Do(func() {
				err = context.DeadlineExceeded
				cmd.SetErr(err)
			})
		}
		return err
	}
}

func (l *lostAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRatedAppendAnswerLostStaysCounted: a post counted in its windows by
// its append, whose answer is lost after Redis ran it, is stored, so it
// stays counted: the script keeps a post's entries only if it stored the
// post, so an entry there is a stored post's, and a window counts the
// posts stored. (Before, it was taken out in the background, and the
// window let one post more through for each lost answer.)
func TestRatedAppendAnswerLostStaysCounted(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	l := NewRateLimiter(s, chatrelay.Windows{PerThread: 5, PerIP: 5, Window: 10 * time.Minute})
	ctx := t.Context()
	const th, ip = "a1b2c3d4e5f60718", "192.0.2.7"
	tk, ik := s.limits+"{rl}:tl:"+th, s.limits+"{rl}:il:"+ip
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "before"}))
	for range 2 { // earlier posts, which stay counted
		if _, done, err := s.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "counted"}); !done || err != nil {
			t.Fatalf("AppendLimited: done %v, %v", done, err)
		}
	}
	s.rdb.AddHook(&lostAnswer{key: tk})
	_, done, err := s.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "its answer is lost"})
	if !done {
		t.Fatal("AppendLimited left the post to the two calls")
	}
	wantCode(t, err, chatrelay.StoreUnavailable)
	if p := must[store.Page](t)(s.Since(ctx, th, 0, 0)); len(p.Messages) != 4 {
		t.Fatalf("the thread holds %d messages, want 4: the script ran", len(p.Messages))
	}
	s.later.Wait() // what the store does in the background after the failure
	if a, b := s.rdb.LLen(ctx, tk).Val(), s.rdb.LLen(ctx, ik).Val(); a != 3 || b != 3 {
		t.Fatalf("the windows hold %d and %d posts, want 3 and 3: the lost answer's post is stored", a, b)
	}
	for range 2 { // the window's last two places
		if _, _, err := s.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "counted"}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = s.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "one too many"})
	wantCode(t, err, chatrelay.RateLimited)
	if p := must[store.Page](t)(s.Since(ctx, th, 0, 0)); len(p.Messages) != 6 {
		t.Fatalf("the thread holds %d messages, want 6: the first and the window's 5", len(p.Messages))
	}
}

// TestRatedAppendRefusedByRedisIsUncounted: a post whose append Redis
// answers with an error reply (here a script's error: the append's
// script was not run) is not stored and is taken out of its windows.
func TestRatedAppendRefusedByRedisIsUncounted(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	l := NewRateLimiter(s, chatrelay.Windows{PerThread: 5, PerIP: 5, Window: 10 * time.Minute})
	ctx := t.Context()
	const th, ip = "a1b2c3d4e5f60719", "192.0.2.8"
	tk, ik := s.limits+"{rl}:tl:"+th, s.limits+"{rl}:il:"+ip
	// A thread's meta that is not a hash: the script raises WRONGTYPE
	// after it counted the post, and Redis does not undo a script's writes.
	assert.Success(t, s.rdb.Set(ctx, s.metaKey(th), "not a hash", 0).Err())
	_, done, err := s.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "refused"})
	if !done {
		t.Fatal("AppendLimited left the post to the two calls")
	}
	if err == nil {
		t.Fatal("AppendLimited stored a post on a thread whose meta is not a hash")
	}
	s.later.Wait() // the undo, in the background
	if a, b := s.rdb.LLen(ctx, tk).Val(), s.rdb.LLen(ctx, ik).Val(); a != 0 || b != 0 {
		t.Fatalf("the windows hold %d and %d posts, want 0 and 0: nothing was stored", a, b)
	}
}
