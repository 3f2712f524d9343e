package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// callLog records the commands a client sends (a pipeline's each), by
// name, a script by its name in scripts.
type callLog struct {
	mu      sync.Mutex
	calls   []string
	scripts map[string]string // sha -> name
}

func (l *callLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *callLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.note(cmd)
		return next(ctx, cmd)
	}
}

func (l *callLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			l.note(c)
		}
		return next(ctx, cmds)
	}
}

func (l *callLog) note(cmd redis.Cmder) {
	name := cmd.Name()
	if a := cmd.Args(); (name == "evalsha" || name == "eval") && len(a) > 1 {
		if n, ok := l.scripts[fmt.Sprint(a[1])]; ok {
			name = n
		}
	}
	l.mu.Lock()
	l.calls = append(l.calls, name)
	l.mu.Unlock()
}

// take returns the calls so far and forgets them.
func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

// threadOnShard returns a thread id on shard k of sh.
func threadOnShard(sh *Sharded, k int) string {
	for i := 0; ; i++ {
		if th := fmt.Sprintf("%016x", 0x5a0000+i); sh.ShardOf(th) == k {
			return th
		}
	}
}

// TestShardedCreationRoundTrips: on two instances, a post that creates
// its thread on shard 1 asks shard 0 once before it is answered: the
// creation lock and shard 0's thread count in one script; the lock is
// released after, in the background.
func TestShardedCreationRoundTrips(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	sh := openSharded(t, spec, Options{Prefix: prefix, MaxThreads: 10})
	s0 := sh.Shards()[0]
	log := &callLog{scripts: map[string]string{unlockScript.Hash(): "unlock", appendScript.Hash(): "append", lockScript.Hash(): "lock and count"}}
	s0.rdb.AddHook(log)
	ctx := t.Context()
	must[store.Entry](t)(sh.Append(ctx, threadOnShard(sh, 0), store.NewMessage{Text: "one on shard 0"}))
	unlocked := func() bool { return s0.rdb.Exists(ctx, s0.prefix+"create-lock").Val() == 0 }
	assert.Eventually(t, 5*time.Second, "the creation lock released", unlocked)
	log.take()

	must[store.Entry](t)(sh.Append(ctx, threadOnShard(sh, 1), store.NewMessage{Text: "creates its thread"}))
	var before []string
	for _, c := range log.take() {
		if c != "unlock" && c != "hello" && c != "client" { // (a new connection's handshake)
			before = append(before, c)
		}
	}
	if len(before) != 1 {
		t.Fatalf("the creating post asked shard 0 %v before its answer; want one call (lock and count)", before)
	}
	assert.Eventually(t, 5*time.Second, "the creation lock released", unlocked)
	n := 0
	for _, p := range sh.Shards() {
		n += int(p.rdb.ZCard(ctx, p.index).Val())
	}
	if n != 2 {
		t.Fatalf("%d threads, want 2", n)
	}
}

// TestShardedAppendLimited: on instances, a thread's rate window is on
// the thread's shard and an address's on the shard of its hash; a post
// is one script with both windows where they are on its thread's shard,
// and otherwise the address's script, then the append with the thread's
// window; in both windows or in neither. On a cluster it is left to the
// two calls.
func TestShardedAppendLimited(t *testing.T) {
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		sh := openSharded(t, spec, Options{Prefix: prefix})
		l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 2, PerIP: 6, Window: time.Minute})
		ctx := t.Context()
		ip := addressOnShard(sh, 0)
		if sh.cluster != nil {
			if _, done, err := sh.AppendLimited(ctx, l, threadOnShard(sh, 0), ip, store.NewMessage{Text: "x"}); done || err != nil {
				t.Fatalf("AppendLimited on a cluster: done %v, %v; want left to the two calls", done, err)
			}
			return
		}
		window := func(k int, key string) int64 { return sh.Shards()[k].rdb.LLen(ctx, prefix+key).Val() }
		for _, k := range []int{0, 1} { // the thread on the address's shard, then on the other
			th := threadsOnShard(sh, k, 1, 0x5b0000*(k+1))[0]
			for i := range 2 {
				_, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: fmt.Sprint("post ", i)})
				if !done || err != nil {
					t.Fatalf("thread on shard %d, post %d: done %v, %v; want stored", k, i, done, err)
				}
			}
			if n := window(k, "{rl}:tl:"+th); n != 2 {
				t.Fatalf("thread on shard %d: its window on its shard holds %d posts, want 2", k, n)
			}
			_, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "third"})
			if !done {
				t.Fatalf("thread on shard %d: the third post was left to the two calls", k)
			}
			wantCode(t, err, chatrelay.RateLimited)
			if p := must[store.Page](t)(sh.Since(ctx, th, 0, 0)); len(p.Messages) != 2 {
				t.Fatalf("thread on shard %d holds %d messages, want 2", k, len(p.Messages))
			}
		}
		// The address's window counted the four posts stored, not the two
		// refused by their thread's.
		if n := window(0, "{rl}:il:"+ip); n != 4 {
			t.Fatalf("the address's window holds %d posts, want 4", n)
		}
		// A replay is counted in neither window.
		th := threadsOnShard(sh, 1, 1, 0x5c0000)[0]
		first, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "once", ClientID: "c-1"})
		if !done || err != nil {
			t.Fatalf("a post with a client id: done %v, %v", done, err)
		}
		again, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "once", ClientID: "c-1"})
		if !done || err != nil || !again.Replayed || again.Epoch != first.Epoch {
			t.Fatalf("its retry: done %v, replayed %v, epoch %d (first %d), %v; want the replay", done, again.Replayed, again.Epoch, first.Epoch, err)
		}
		if n := window(0, "{rl}:il:"+ip); n != 5 {
			t.Fatalf("the address's window holds %d posts after a post and its replay, want 5", n)
		}
		if _, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "sixth"}); !done || err != nil {
			t.Fatalf("the sixth post: done %v, %v", done, err)
		}
		// The address's window full: a post to another shard's thread is
		// left to the two calls (which answer a replay before the
		// refusal), counted nowhere and stored nowhere.
		full := threadsOnShard(sh, 1, 1, 0x5d0000)[0]
		if _, done, err := sh.AppendLimited(ctx, l, full, ip, store.NewMessage{Text: "over"}); done || err != nil {
			t.Fatalf("over the address's window: done %v, %v; want left to the two calls", done, err)
		}
		if n := window(1, "{rl}:tl:"+full); n != 0 {
			t.Fatalf("the refused post is in its thread's window (%d)", n)
		}
		if p := must[store.Page](t)(sh.Since(ctx, full, 0, 0)); len(p.Messages) != 0 {
			t.Fatalf("the refused post was stored: %v", p.Messages)
		}
	})
}

// TestShardedTake: Take on instances counts a post in its thread's window
// on the thread's shard and its address's on that one's; a post one of
// them refuses is in neither, and undo takes it out of both.
func TestShardedTake(t *testing.T) {
	spec, prefix := shardSpec(t, "shards")
	sh := openSharded(t, spec, Options{Prefix: prefix})
	l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 1, PerIP: 3, Window: time.Minute})
	ctx := t.Context()
	ip := addressOnShard(sh, 0)
	ths := threadsOnShard(sh, 1, 3, 0x5e0000)
	window := func(k int, key string) int64 { return sh.Shards()[k].rdb.LLen(ctx, prefix+key).Val() }
	undo, err := l.Take(ctx, ths[0], ip)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := window(0, "{rl}:il:"+ip), window(1, "{rl}:tl:"+ths[0]); a != 1 || b != 1 {
		t.Fatalf("after a take: the address's window %d, the thread's %d; want 1 and 1", a, b)
	}
	_, err = l.Take(ctx, ths[0], ip)
	wantCode(t, err, chatrelay.RateLimited)
	if a := window(0, "{rl}:il:"+ip); a != 1 {
		t.Fatalf("a take the thread's window refused is in the address's (%d)", a)
	}
	undo(false)
	if a, b := window(0, "{rl}:il:"+ip), window(1, "{rl}:tl:"+ths[0]); a != 0 || b != 0 {
		t.Fatalf("after undo: the address's window %d, the thread's %d; want 0 and 0", a, b)
	}
	for _, th := range ths {
		if _, err := l.Take(ctx, th, ip); err != nil {
			t.Fatal(err)
		}
	}
	_, err = l.Take(ctx, threadsOnShard(sh, 1, 1, 0x5f0000)[0], ip)
	wantCode(t, err, chatrelay.RateLimited)
	if a := window(0, "{rl}:il:"+ip); a != 3 {
		t.Fatalf("the address's window holds %d, want 3", a)
	}
}

// addressOnShard is a client address whose rate window is on shard k.
func addressOnShard(sh *Sharded, k int) string {
	for i := 1; ; i++ {
		if ip := fmt.Sprintf("198.51.100.%d", i); shardIndex(ip, len(sh.Shards())) == k {
			return ip
		}
	}
}

// threadsOnShard is n thread ids on shard k, from base up.
func threadsOnShard(sh *Sharded, k, n, base int) []string {
	var ths []string
	for i := 0; len(ths) < n; i++ {
		if th := fmt.Sprintf("%016x", base+i); sh.ShardOf(th) == k {
			ths = append(ths, th)
		}
	}
	return ths
}

// TestShardedCreationBurst: a burst of posts that each create a thread,
// on two nodes, is answered, not refused as an unreachable store: each
// node's posts wait for the creation lock in turn, rather than every one
// of them asking Redis for it again and again until its store timeout,
// and each waits as long as the lock moves on, up to maxCreateWait store
// timeouts, however long the turns before it take (on a loaded machine, 160 of the 300 were refused
// when the whole wait counted in one store timeout).
func TestShardedCreationBurst(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	nodes := []*Sharded{
		openSharded(t, spec, Options{Prefix: prefix, MaxThreads: 1000}),
		openSharded(t, spec, Options{Prefix: prefix, MaxThreads: 1000}),
	}
	ctx := t.Context()
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := nodes[i%2].Append(ctx, fmt.Sprintf("%016x", 0xb0b0000+i), store.NewMessage{Text: "new"})
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if len(errs) > 0 {
		t.Fatalf("%d of %d creating posts failed, the first: %v", len(errs), n, <-errs)
	}
}

// TestShardedCreationSlowTurns: 24 posts that each create a thread, on
// two nodes at once, while every holder's turn is slow (it holds the
// creation lock 200 ms): the turns take 4.8 s in all, 1.6 store timeouts
// (and a sixth of the wait's bound, maxCreateWait store timeouts), and
// every post is answered, stored or refused thread_limit past the limit,
// none 503 store_unavailable, since a turn ended all the while. The
// limit holds exactly across the nodes.
//
// Each turn is a fifteenth of the store timeout, so that the whole of a
// turn (its sleep, its Redis calls, the unlock) on a loaded machine stays
// far within the timeout a waiting post allows it: at a store timeout of
// 1 s and turns of 100 ms, 3 of 24 posts were refused errNoTurn with two
// CPU hogs beside the test.
func TestShardedCreationSlowTurns(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	opt := Options{Prefix: prefix, MaxThreads: 20, Timeout: 3 * time.Second}
	nodes := []*Sharded{openSharded(t, spec, opt), openSharded(t, spec, opt)}
	for _, sh := range nodes {
		sh.turn = func() { time.Sleep(opt.Timeout / 15) } // the holder's work, slowed
	}
	ctx := t.Context()
	const n = 24
	var mu sync.Mutex
	codes := map[chatrelay.Code]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := nodes[i%2].Append(ctx, fmt.Sprintf("%016x", 0x51070000+i), store.NewMessage{Text: "new"})
			mu.Lock()
			defer mu.Unlock()
			codes[chatrelay.CodeOf(err)]++
			if c := chatrelay.CodeOf(err); c != "" && c != chatrelay.ThreadLimit {
				t.Errorf("a creating post: %v", err)
			}
		})
	}
	wg.Wait()
	if codes[""] != 20 || codes[chatrelay.ThreadLimit] != 4 {
		t.Fatalf("of %d creating posts: %v; want 20 stored and 4 refused thread_limit", n, codes)
	}
	threads := 0
	for _, s := range nodes[0].Shards() {
		threads += int(s.rdb.ZCard(ctx, s.index).Val())
	}
	if threads != 20 {
		t.Fatalf("%d threads on the shards, want 20", threads)
	}
}

// TestShardedCreationHungHolder: a holder of the creation lock that
// hangs (no turn ends, the lock does not change hands) fails the posts
// waiting for it, on its node (in the node's queue) and on another (for
// the lock on shard 0), 503 store_unavailable after a store timeout
// without progress; they leave nothing behind, and once the holder goes
// on, the lock is released and new threads are created on both nodes.
func TestShardedCreationHungHolder(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	// The store timeout is the default 2 s, not a shorter one: it bounds
	// the opens and every call too (at 500 ms, an open failed on a loaded
	// machine), and the waits' refusal comes after it either way.
	opt := Options{Prefix: prefix, MaxThreads: 100, Timeout: 2 * time.Second}
	a, b := openSharded(t, spec, opt), openSharded(t, spec, opt)
	s0 := a.Shards()[0]
	ctx := t.Context()
	lock := s0.prefix + "create-lock"
	entered, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free) // a failure below leaves no turn hanging: the test ends
	a.turn = func() {
		once.Do(func() {
			// It holds the lock as long as it hangs, not its lapse.
			s0.rdb.PExpire(ctx, lock, time.Minute)
			close(entered)
			<-release
		})
	}
	held := make(chan error, 1)
	go func() {
		_, err := a.Append(ctx, threadOnShard(a, 1), store.NewMessage{Text: "its holder hangs"})
		held <- err
	}()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the first post did not take the creation lock")
	}
	waiters := threadsOnShard(a, 0, 6, 0x5a100000)
	errs := make([]error, len(waiters))
	var wg sync.WaitGroup
	for i, th := range waiters {
		node := a
		if i%2 == 1 {
			node = b
		}
		wg.Go(func() {
			_, errs[i] = node.Append(ctx, th, store.NewMessage{Text: "waits"})
		})
	}
	wg.Wait()
	for i, err := range errs {
		wantCode(t, err, chatrelay.StoreUnavailable)
		if p := must[store.Page](t)(a.Since(ctx, waiters[i], 0, 0)); len(p.Messages) != 0 {
			t.Fatalf("a refused post was stored: %v", p.Messages)
		}
	}
	free()
	assert.Success(t, <-held)
	assert.Eventually(t, 10*time.Second, "the creation lock released", func() bool {
		return s0.rdb.Exists(ctx, lock).Val() == 0
	})
	threads := 0
	for _, s := range a.Shards() {
		threads += int(s.rdb.ZCard(ctx, s.index).Val() + s.rdb.ZCard(ctx, s.places).Val())
	}
	if threads != 1 {
		t.Fatalf("%d places taken in the thread limit, want 1: the hung holder's", threads)
	}
	for i, node := range []*Sharded{a, b} {
		must[store.Entry](t)(node.Append(ctx, threadsOnShard(node, 1, 1, 0x5a200000+0x1000*i)[0], store.NewMessage{Text: "after"}))
	}
}

// TestShardedCreationWaitHasAnEnd: a post that waits for the creation lock
// while it changes hands all the time, never to its node (other nodes'
// endless turns, played here by setting the lock to a new holder every
// 50 ms), is refused store_unavailable once its wait reaches its bound
// (maxCreateWait store timeouts), and not only when its caller gives up:
// an HTTP request has no deadline of its own.
//
// The store timeout is a generous 3 s and the wait's bound is shortened
// to 1.5 s: each of the wait's calls to Redis (hundreds) is so far from
// its own timeout that a loaded CI machine does not end the wait for
// Redis's silence first (at a store timeout of 200, then 500 ms, one
// call in a CI run timed out and the post was refused for that).
func TestShardedCreationWaitHasAnEnd(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	opt := Options{Prefix: prefix, MaxThreads: 100, Timeout: 3 * time.Second}
	a := openSharded(t, spec, opt)
	if a.createWait != maxCreateWait*opt.Timeout {
		t.Fatalf("the wait's bound is %v, want %d store timeouts", a.createWait, maxCreateWait)
	}
	a.createWait = opt.Timeout / 2
	s0 := a.Shards()[0]
	lock := s0.prefix + "create-lock"
	// The lock is held before the post asks for it, then changes hands.
	assert.Success(t, s0.rdb.Set(t.Context(), lock, "other-node-0", time.Minute).Err())
	churn, cancelChurn := context.WithCancel(t.Context())
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-churn.Done():
				return
			case <-tick.C:
			}
			s0.rdb.Set(churn, lock, fmt.Sprintf("other-node-%d", i), time.Minute)
		}
	}()
	// The caller's own bound, far past the wait's: the wait must end first.
	ctx, cancel := context.WithTimeout(t.Context(), 20*a.createWait)
	defer cancel()
	th := threadOnShard(a, 1)
	_, err := a.Append(ctx, th, store.NewMessage{Text: "waits for a lock that never comes"})
	ended := ctx.Err()
	cancelChurn()
	<-churned
	wantCode(t, err, chatrelay.StoreUnavailable)
	if ended != nil {
		t.Fatalf("the post waited until its caller gave up (%v): the wait for the creation lock has no end of its own", ended)
	}
	if !errors.Is(err, errWaitTooLong) {
		t.Fatalf("the post was refused for another reason than its wait's bound: %v", err)
	}
	s0.rdb.Del(t.Context(), lock)
	if p := must[store.Page](t)(a.Since(t.Context(), th, 0, 0)); len(p.Messages) != 0 {
		t.Fatalf("a refused post was stored: %v", p.Messages)
	}
}

// TestShardedCreationLockAnswerLost: a node whose call for the creation
// lock fails after Redis took the lock for it (the answer came after the
// store timeout) releases it: the other nodes' new threads do not wait
// for it to lapse (three store timeouts) and fail meanwhile.
func TestShardedCreationLockAnswerLost(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	// The default store timeout: the lost answer is played by a hook, so
	// the timeout bounds only the opens and the calls (at 1 s, an open
	// failed on a loaded machine), and the lapse stays three of them.
	opt := Options{Prefix: prefix, MaxThreads: 100, Timeout: 2 * time.Second}
	a, b := openSharded(t, spec, opt), openSharded(t, spec, opt)
	s0 := a.Shards()[0]
	s0.rdb.AddHook(&lostAnswer{key: s0.prefix + "create-lock"})
	ctx := t.Context()
	_, err := a.Append(ctx, threadOnShard(a, 1), store.NewMessage{Text: "its lock's answer is lost"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	if _, err := b.Append(ctx, threadOnShard(b, 0), store.NewMessage{Text: "on the other node"}); err != nil {
		t.Fatalf("a new thread on the other node, after the lost answer: %v", err)
	}
}

// TestAddressWindowOnADownShard: on instances, an address's window is on
// the shard its hash picks; while that shard does not answer, a post
// from the address to a thread of another shard is counted in a window
// of the address on the thread's shard (Take and AppendLimited), not
// refused 503: one address in N was refused on every thread while one
// shard of N was down. The window still holds there.
func TestAddressWindowOnADownShard(t *testing.T) {
	s0 := redistest.StartServer(t, redistest.ServerOptions{})
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	sh := openSharded(t, s0.URL()+","+s1.URL(), Options{Prefix: "aw:"})
	l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 100, PerIP: 2, Window: time.Minute})
	ip := addressOnShard(sh, 1)
	ths := threadsOnShard(sh, 0, 2, 0x5a0000)
	for _, th := range ths { // made while every shard answers (a new thread needs them all)
		_, err := sh.Append(t.Context(), th, store.NewMessage{Text: "first"})
		assert.Success(t, err)
	}
	s1.Kill()
	_, err := l.Take(t.Context(), ths[0], ip)
	assert.Success(t, err)
	_, done, err := sh.AppendLimited(t.Context(), l, ths[1], ip, store.NewMessage{Text: "hi"})
	assert.True(t, done, "AppendLimited left the post to the two calls")
	assert.Success(t, err)
	_, err = l.Take(t.Context(), ths[0], ip)
	wantCode(t, err, chatrelay.RateLimited)
}

// TestAddressWindowSkipsAShardFoundDown: on instances, once a check
// found the shard of an address's window down (stalled: it takes
// connections and answers nothing), a post from the address is counted
// on its thread's shard at once, without trying the stalled shard first
// (and waiting its timeout) each time; once a check finds it answering
// again, the address's posts are counted there again.
func TestAddressWindowSkipsAShardFoundDown(t *testing.T) {
	testAddressWindowSkipsAStalledShard(t, "as:", 0x5b0000, true)
}

// TestAddressWindowSkipsAShardThatFailed: on instances, a post whose
// count on the shard of its address's window failed (a stall's whole
// store timeout) marks that shard down as a check would, so that the
// address's next posts are counted on their thread's shard at once, with
// no check run (a deployment that never asks /readyz): before, each of
// them tried the stalled shard and waited out its timeout. The first
// answer of the shard (any call) sends them back to it.
func TestAddressWindowSkipsAShardThatFailed(t *testing.T) {
	testAddressWindowSkipsAStalledShard(t, "af:", 0x5d0000, false)
}

// testAddressWindowSkipsAStalledShard stalls the shard of an address's
// window after a first post tried it, then posts 6 times (after a check
// that finds it down, if check) and counts what reached the stalled
// shard; then shard 1 answers (a check, or a call) and the next post is
// counted there.
func testAddressWindowSkipsAStalledShard(t *testing.T, prefix string, threadsFrom int, check bool) {
	s0 := redistest.StartServer(t, redistest.ServerOptions{})
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	p := startStallProxy(t, s1.Addr())
	// The default store timeout: a post tries the stalled shard for as
	// long once, which is all the test counts (at 500 ms, an open failed
	// on a loaded machine).
	sh := openSharded(t, s0.URL()+","+p.url(), Options{Prefix: prefix, Timeout: 2 * time.Second})
	l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 100, PerIP: 100, Window: time.Minute})
	ip := addressOnShard(sh, 1)
	ths := threadsOnShard(sh, 0, 2, threadsFrom)
	for _, th := range ths { // made while every shard answers (a new thread needs them all)
		_, err := sh.Append(t.Context(), th, store.NewMessage{Text: "first"})
		assert.Success(t, err)
	}
	window := "{rl}:il:" + ip // in the commands that count the address on shard 1
	ctx := t.Context()
	p.stall()
	post := func() {
		t.Helper()
		_, done, err := sh.AppendLimited(ctx, l, ths[0], ip, store.NewMessage{Text: "hi"})
		assert.True(t, done, "AppendLimited left the post to the two calls")
		assert.Success(t, err)
	}
	post() // tries shard 1, which does not answer: counted on shard 0
	if n := p.count(window); n != 1 {
		t.Fatalf("the first post sent %d counts to the stalled shard, want 1", n)
	}
	if check {
		if err := sh.Check(ctx); !store.Partial(err) {
			t.Fatalf("Check with shard 1 stalled: %v, want a partial error", err)
		}
	}
	dials := p.dials()
	for range 3 {
		post()
		_, err := l.Take(ctx, ths[1], ip)
		assert.Success(t, err)
	}
	// A new connection stalls in its handshake, before the count is sent.
	if n, d := p.count(window), p.dials()-dials; n != 1 || d != 0 {
		t.Fatalf("shard 1 stalled (a check run: %v), 6 posts after the first sent it %d dials, and %d counts of the address in all, want 0 and still 1", check, d, n)
	}
	p.resume()
	if check {
		assert.Success(t, sh.Check(ctx))
	} else {
		assert.Success(t, sh.Shards()[1].rdb.Ping(ctx).Err()) // shard 1 answers a call
	}
	post()
	if n := p.count(window); n != 2 {
		t.Fatalf("once shard 1 answers again, it got %d counts of the address, want 2", n)
	}
}

// TestCheckKeepsAShardThatAnsweredMeanwhile: a check whose call to a
// shard stalls, while another call to that shard answers, does not mark
// the shard down when it times out: the answer is newer than the check's
// start, and the posts whose address's window is on that shard go on
// counting it there (before, they went to their thread's shard until the
// shard's next answer).
func TestCheckKeepsAShardThatAnsweredMeanwhile(t *testing.T) {
	s0 := redistest.StartServer(t, redistest.ServerOptions{})
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	p := startStallProxy(t, s1.Addr())
	// A timeout no loaded machine reaches: the check's call fails when
	// the test cuts its connection, after shard 1 answered the ping.
	sh := openSharded(t, s0.URL()+","+p.url(), Options{Prefix: "ck:", Timeout: time.Minute})
	l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 100, PerIP: 100, Window: time.Minute})
	ip := addressOnShard(sh, 1)
	th := threadsOnShard(sh, 0, 1, 0x5c0000)[0]
	ctx := t.Context()
	must[store.Entry](t)(sh.Append(ctx, th, store.NewMessage{Text: "first"}))
	p.stallOn("readyz") // the check's write, on its connection only
	checked := make(chan error, 1)
	go func() { checked <- sh.Check(ctx) }()
	assert.Eventually(t, 10*time.Second, "the check's call to reach shard 1", func() bool { return p.count("readyz") > 0 })
	assert.Success(t, sh.Shards()[1].rdb.Ping(ctx).Err()) // shard 1 answers, on another connection
	p.cutStalled()                                        // then the check's call fails
	if err := <-checked; !store.Partial(err) {
		t.Fatalf("Check with its call to shard 1 stalled: %v, want a partial error", err)
	}
	window := "{rl}:il:" + ip
	_, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "hi"})
	assert.True(t, done, "AppendLimited left the post to the two calls")
	assert.Success(t, err)
	if n := p.count(window); n != 1 {
		t.Fatalf("shard 1 answered after the check began, and got %d counts of the address, want 1", n)
	}
}

// TestCallKeepsRedisThatAnsweredMeanwhile: on one Redis, an ordinary
// call that stalls, and fails after Redis answered another call, leaves
// Redis up (not down until the next answer): the answer is newer than the
// call's start. One that fails with no answer since it began marks it
// down.
func TestCallKeepsRedisThatAnsweredMeanwhile(t *testing.T) {
	r := redistest.StartServer(t, redistest.ServerOptions{})
	p := startStallProxy(t, r.Addr())
	s, err := Open(t.Context(), p.url(), Options{Prefix: "cr:", Timeout: time.Minute, Log: testLogger(t)})
	assert.Success(t, err)
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	th := fmt.Sprintf("%016x", 0x5f0000)
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "first"}))

	stalled := func(text string) <-chan error {
		p.stallOn(text)
		appended := make(chan error, 1)
		go func() {
			_, err := s.Append(ctx, th, store.NewMessage{Text: text})
			appended <- err
		}()
		assert.Eventually(t, 10*time.Second, "the append to reach Redis", func() bool { return p.count(text) > 0 })
		return appended
	}
	appended := stalled("stalledappend")
	assert.Success(t, s.rdb.Ping(ctx).Err()) // Redis answers, on another connection
	p.cutOn("stalledappend")                 // then the append, begun before, fails
	if err := <-appended; chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
		t.Fatalf("the append whose connection was cut: %v, want store_unavailable", err)
	}
	assert.True(t, !s.down.Load(), "Redis answered after the failed append began, and is marked down")

	appended = stalled("alonestalled")
	p.cutOn("alonestalled") // no answer since it began
	if err := <-appended; chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
		t.Fatalf("the append whose connection was cut: %v, want store_unavailable", err)
	}
	assert.True(t, s.down.Load(), "a call failed with no answer since it began, and Redis is not marked down")
}

// TestOwnHandshakeIsNoAnswer: a call whose connection is new, and whose
// command stalls after the connection's handshake (HELLO, CLIENT
// SETNAME) answered, marks Redis down when it fails: the handshake is the
// call's own, older than its command, and no news that Redis answered
// since the command began (a Redis that takes connections and answers
// nothing else is down).
func TestOwnHandshakeIsNoAnswer(t *testing.T) {
	r := redistest.StartServer(t, redistest.ServerOptions{})
	p := startStallProxy(t, r.Addr())
	// A timeout no loaded machine reaches: the append fails when the
	// test cuts its connection.
	s, err := Open(t.Context(), p.url(), Options{Prefix: "hs:", Timeout: time.Minute, Log: testLogger(t)})
	assert.Success(t, err)
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	th := fmt.Sprintf("%016x", 0x600000)
	must[store.Entry](t)(s.Append(ctx, th, store.NewMessage{Text: "first"}))

	p.cutAll() // every connection the store holds is lost: the next call dials
	dials := p.dials()
	p.stallOn("newconnstalled")
	appended := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, th, store.NewMessage{Text: "newconnstalled"})
		appended <- err
	}()
	assert.Eventually(t, 10*time.Second, "the append to reach Redis", func() bool { return p.count("newconnstalled") > 0 })
	assert.True(t, p.dials() > dials, "the append did not dial a new connection")
	p.cutOn("newconnstalled")
	if err := <-appended; chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
		t.Fatalf("the append whose connection was cut: %v, want store_unavailable", err)
	}
	assert.True(t, s.down.Load(), "a call failed with no answer but its own connection's handshake, and Redis is not marked down")
}

// TestCallKeepsAShardThatAnsweredMeanwhile: an ordinary call to a shard
// (an append) that stalls, and fails after the shard answered another
// call, does not mark the shard down: the answer is newer than the call's
// start. So after a check found the shard down and the shard answered
// again, the posts whose address's window is on that shard count it
// there (before, the stalled append's failure marked the shard down once
// more, and they went to their thread's shard until its next answer).
func TestCallKeepsAShardThatAnsweredMeanwhile(t *testing.T) {
	s0 := redistest.StartServer(t, redistest.ServerOptions{})
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	p := startStallProxy(t, s1.Addr())
	// A timeout no loaded machine reaches: the calls fail when the test
	// cuts their connections.
	sh := openSharded(t, s0.URL()+","+p.url(), Options{Prefix: "cl:", Timeout: time.Minute})
	l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 100, PerIP: 100, Window: time.Minute})
	ip := addressOnShard(sh, 1)
	th := threadsOnShard(sh, 0, 1, 0x5d0000)[0]
	th1 := threadsOnShard(sh, 1, 1, 0x5e0000)[0]
	ctx := t.Context()
	must[store.Entry](t)(sh.Append(ctx, th, store.NewMessage{Text: "first"}))
	must[store.Entry](t)(sh.Append(ctx, th1, store.NewMessage{Text: "first"}))

	p.stallOn("stalledappend") // the append's write, on its connection only
	appended := make(chan error, 1)
	go func() {
		_, err := sh.Append(ctx, th1, store.NewMessage{Text: "stalledappend"})
		appended <- err
	}()
	assert.Eventually(t, 10*time.Second, "the append to reach shard 1", func() bool { return p.count("stalledappend") > 0 })

	p.stallOn("readyz") // a check finds shard 1 down: its call's connection is cut
	checked := make(chan error, 1)
	go func() { checked <- sh.Check(ctx) }()
	assert.Eventually(t, 10*time.Second, "the check's call to reach shard 1", func() bool { return p.count("readyz") > 0 })
	p.cutOn("readyz")
	if err := <-checked; !store.Partial(err) {
		t.Fatalf("Check with its call to shard 1 cut: %v, want a partial error", err)
	}

	assert.Success(t, sh.Shards()[1].rdb.Ping(ctx).Err()) // shard 1 answers again
	p.cutOn("stalledappend")                              // then the append, begun before, fails
	if err := <-appended; chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
		t.Fatalf("the append whose connection was cut: %v, want store_unavailable", err)
	}

	window := "{rl}:il:" + ip
	_, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: "hi"})
	assert.True(t, done, "AppendLimited left the post to the two calls")
	assert.Success(t, err)
	if n := p.count(window); n != 1 {
		t.Fatalf("shard 1 answered after the failed append began, and got %d counts of the address, want 1", n)
	}
}

// stallProxy forwards loopback connections to a Redis until stall: from
// then on every connection, open or new, takes what it is sent and
// answers nothing, until resume (for new connections). It counts the
// connections it takes (dials) and the chunks its clients send that
// name a string (count).
type stallProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	stalled chan struct{} // closed while stalled
	sent    []string      // every chunk a client sent
	conns   []net.Conn    // every connection taken
	closed  bool          // the test ended: a connection taken now is closed at once
	on      string        // stallOn's: a connection that sends it stalls from then on
	onConns []net.Conn    // the connections stalled by on
	onNames []string      // the on that stalled each of onConns
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, stalled: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.closed = true
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

func (p *stallProxy) url() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.stalled)
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = make(chan struct{})
}

// stallOn stalls each connection, open or new, from the first chunk it
// sends that names s: that chunk and what follows are taken and never
// answered. Other connections go on.
func (p *stallProxy) stallOn(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = s
}

// cutStalled closes the connections stallOn stalled: their calls fail
// at once (a lost connection), not at their timeout.
func (p *stallProxy) cutStalled() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.onConns {
		c.Close()
	}
}

// cutOn closes the connections stallOn(s) stalled: their calls fail at
// once (a lost connection); those another string stalled go on stalled.
func (p *stallProxy) cutOn(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.onConns {
		if p.onNames[i] == s {
			c.Close()
		}
	}
}

// cutAll closes every connection the proxy took: the client's calls on
// them fail, and its next calls dial.
func (p *stallProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// dials is how many connections the proxy took.
func (p *stallProxy) dials() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// count is how many chunks sent by the clients named s.
func (p *stallProxy) count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.sent {
		if strings.Contains(c, s) {
			n++
		}
	}
	return n
}

func (p *stallProxy) serve(c net.Conn) {
	defer c.Close()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.conns = append(p.conns, c)
	stalled := p.stalled
	p.mu.Unlock()
	var u net.Conn
	select {
	case <-stalled:
	default:
		var err error
		if u, err = net.Dial("tcp", p.target); err != nil {
			return
		}
		var copying sync.WaitGroup
		defer copying.Wait()
		defer u.Close()                      // before the wait: ends the copy
		copying.Go(func() { io.Copy(c, u) }) // Redis's answers, until either is closed
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.sent = append(p.sent, string(buf[:n]))
			if p.on != "" && strings.Contains(string(buf[:n]), p.on) && !isClosed(stalled) {
				stalled = make(chan struct{}) // this connection's alone
				close(stalled)
				p.onConns = append(p.onConns, c)
				p.onNames = append(p.onNames, p.on)
			}
			p.mu.Unlock()
			select {
			case <-stalled: // taken, never answered
				if u != nil {
					u.Close()
				}
			default:
				u.Write(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// TestShardedAppendAnswerLostStaysCounted: a post whose address's window
// is on another shard than its thread, and whose append's answer is lost
// after its shard stored it, stays counted in the address's window too
// (the thread's window, counted in the append's script, says it was
// stored); one whose append was not run is taken out of it.
func TestShardedAppendAnswerLostStaysCounted(t *testing.T) {
	spec, prefix := shardSpec(t, "shards")
	sh := openSharded(t, spec, Options{Prefix: prefix})
	l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 10, PerIP: 10, Window: time.Minute})
	ctx := t.Context()
	ip := addressOnShard(sh, 0)
	th := threadsOnShard(sh, 1, 1, 0x5d0000)[0]
	must[store.Entry](t)(sh.Append(ctx, th, store.NewMessage{Text: "first"}))
	ik := prefix + "{rl}:il:" + ip
	window := func() int64 { return sh.Shards()[0].rdb.LLen(ctx, ik).Val() }
	post := func(text string) error {
		t.Helper()
		_, done, err := sh.AppendLimited(ctx, l, th, ip, store.NewMessage{Text: text})
		if !done {
			t.Fatal("AppendLimited left the post to the two calls")
		}
		return err
	}
	assert.Success(t, post("counted"))
	sh.Shards()[1].rdb.AddHook(&lostAnswer{key: prefix + "{rl}:tl:" + th})
	wantCode(t, post("its answer is lost"), chatrelay.StoreUnavailable)
	if p := must[store.Page](t)(sh.Since(ctx, th, 0, 0)); len(p.Messages) != 3 {
		t.Fatalf("the thread holds %d messages, want 3: the script ran", len(p.Messages))
	}
	sh.Shards()[0].later.Wait() // what the stores do in the background after the failure
	sh.Shards()[1].later.Wait()
	if n := window(); n != 2 {
		t.Fatalf("the address's window holds %d posts, want 2: the lost answer's post is stored", n)
	}
	// An append its shard refuses before running it (a Redis error
	// reply): not stored, taken out of the address's window.
	sh.Shards()[1].rdb.AddHook(&refusedOnce{key: prefix + "{rl}:tl:" + th})
	if err := post("refused"); err == nil {
		t.Fatal("a post whose append Redis refused was acknowledged")
	}
	sh.Shards()[0].later.Wait()
	sh.Shards()[1].later.Wait()
	if n := window(); n != 2 {
		t.Fatalf("after a refused append the address's window holds %d posts, want 2", n)
	}
}

// refusedOnce answers the first call that names key with a Redis error
// reply, without sending it.
type refusedOnce struct {
	key  string
	once sync.Once
}

func (r *refusedOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *refusedOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		refused := false
		if slices.ContainsFunc(cmd.Args(), func(a any) bool { return argText(a) == r.key }) {
			r.once.Do(func() { refused = true })
		}
		if !refused {
			return next(ctx, cmd)
		}
		err := errorReply("ERR refused by the test")
		cmd.SetErr(err)
		return err
	}
}

func (r *refusedOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// errorReply is an error reply of Redis (redis.Error).
type errorReply string

func (e errorReply) Error() string { return string(e) }
func (errorReply) RedisError()     {}

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestCheckCanceledMarksNoShardDown: a check whose caller gave up (a
// readiness probe that hung up) says nothing of the shards: none is
// marked down, so the addresses' windows stay where they are.
func TestCheckCanceledMarksNoShardDown(t *testing.T) {
	s0 := redistest.StartServer(t, redistest.ServerOptions{})
	s1 := redistest.StartServer(t, redistest.ServerOptions{})
	sh := openSharded(t, s0.URL()+","+s1.URL(), Options{Prefix: "cc:"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := sh.Check(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Check with a canceled context: %v, want context.Canceled", err)
	}
	for k, s := range sh.Shards() {
		if sh.down[k].Load() || s.down.Load() {
			t.Errorf("shard %d marked down by a check its caller canceled", k)
		}
	}
}

// TestShardedCreationWaitDefault: a sharded store opened without a store
// timeout bounds a post's wait for the creation lock at maxCreateWait
// default store timeouts, not at none (which would refuse every new
// thread that waits at all).
func TestShardedCreationWaitDefault(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	a := openSharded(t, spec, Options{Prefix: prefix})
	if want := maxCreateWait * chatrelay.DefaultStoreTimeout; a.createWait != want {
		t.Fatalf("the wait's bound is %v, want %v", a.createWait, want)
	}
}

// lateContext is a context whose deadline has passed and whose timer has
// not yet cancelled it: it is cancelled (Done closed, Err set) only once
// something waits on Done, as a loaded machine runs a context's timer
// late, after a Redis call the deadline cut short has failed.
type lateContext struct {
	context.Context
	dl   time.Time
	once sync.Once
	done chan struct{}
}

func (c *lateContext) Deadline() (time.Time, bool) { return c.dl, true }
func (c *lateContext) Done() <-chan struct{} {
	c.once.Do(func() { close(c.done) })
	return c.done
}
func (c *lateContext) Err() error {
	select {
	case <-c.done:
		return errWaitTooLong
	default:
		return nil
	}
}

// TestEndedPastItsDeadline: a wait whose context's deadline has passed
// is ended, with the context's cause, even while the context's timer has
// yet to cancel it: a Redis call that the deadline cut short ("i/o
// timeout", the connection's deadline being the context's) is the wait's
// end, not Redis's silence. CI saw the creation wait refused "store
// unavailable: i/o timeout" at its bound, 1.5 s into a 3 s store timeout.
func TestEndedPastItsDeadline(t *testing.T) {
	t.Parallel()
	if err := ended(t.Context()); err != nil {
		t.Fatalf("a context with no deadline, not done: ended %v", err)
	}
	ahead, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if err := ended(ahead); err != nil {
		t.Fatalf("a context an hour from its deadline: ended %v", err)
	}
	late := &lateContext{Context: t.Context(), dl: time.Now().Add(-time.Millisecond), done: make(chan struct{})}
	if err := ended(late); !errors.Is(err, errWaitTooLong) {
		t.Fatalf("a context past its deadline, its timer not yet run: ended %v, want its cause", err)
	}
}
