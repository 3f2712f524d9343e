package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
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

// TestShardedAppendLimited: on instances, a post to a thread on shard 0
// (which holds the rate windows) is one script with its windows, a
// creating one too; a thread on another shard, or any on a cluster, is
// left to the two calls.
func TestShardedAppendLimited(t *testing.T) {
	eachSharded(t, func(t *testing.T, spec, prefix string) {
		sh := openSharded(t, spec, Options{Prefix: prefix})
		l := sh.NewRateLimiter(chatrelay.Windows{PerThread: 2, PerIP: 100, Window: time.Minute})
		ctx := t.Context()
		const ip = "192.0.2.5"
		on0, on1 := threadOnShard(sh, 0), threadOnShard(sh, 1)
		cluster := sh.cluster != nil
		for i := range 2 {
			_, done, err := sh.AppendLimited(ctx, l, on0, ip, store.NewMessage{Text: fmt.Sprint("post ", i)})
			if done != !cluster || err != nil {
				t.Fatalf("AppendLimited on shard 0: done %v, %v; want done %v", done, err, !cluster)
			}
		}
		if _, done, err := sh.AppendLimited(ctx, l, on1, ip, store.NewMessage{Text: "x"}); done || err != nil {
			t.Fatalf("AppendLimited on shard 1: done %v, %v; want left to the two calls", done, err)
		}
		if cluster {
			return
		}
		_, done, err := sh.AppendLimited(ctx, l, on0, ip, store.NewMessage{Text: "third"})
		if !done {
			t.Fatal("AppendLimited on shard 0 did nothing")
		}
		wantCode(t, err, chatrelay.RateLimited)
		if p := must[store.Page](t)(sh.Since(ctx, on0, 0, 0)); len(p.Messages) != 2 {
			t.Fatalf("the thread holds %d messages, want 2", len(p.Messages))
		}
	})
}

// TestShardedCreationBurst: a burst of posts that each create a thread,
// on two nodes, is answered, not refused as an unreachable store: each
// node's posts wait for the creation lock in turn, rather than every one
// of them asking Redis for it again and again until its store timeout.
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

// lateAnswer makes the first script call on the key named key fail as if
// its answer had come after the caller's deadline, once Redis ran it.
type lateAnswer struct {
	key  string
	once sync.Once
}

func (l *lateAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lateAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); err == nil && len(a) > 3 && fmt.Sprint(a[3]) == l.key {
			l.once.Do(func() {
				err = context.DeadlineExceeded
				cmd.SetErr(err)
			})
		}
		return err
	}
}

func (l *lateAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestShardedCreationLockAnswerLost: a node whose call for the creation
// lock fails after Redis took the lock for it (the answer came after the
// store timeout) releases it: the other nodes' new threads do not wait
// for it to lapse (three store timeouts) and fail meanwhile.
func TestShardedCreationLockAnswerLost(t *testing.T) {
	t.Parallel()
	spec, prefix := shardSpec(t, "shards")
	opt := Options{Prefix: prefix, MaxThreads: 100, Timeout: time.Second}
	a, b := openSharded(t, spec, opt), openSharded(t, spec, opt)
	s0 := a.Shards()[0]
	s0.rdb.AddHook(&lateAnswer{key: s0.prefix + "create-lock"})
	ctx := t.Context()
	_, err := a.Append(ctx, threadOnShard(a, 1), store.NewMessage{Text: "its lock's answer is lost"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	if _, err := b.Append(ctx, threadOnShard(b, 0), store.NewMessage{Text: "on the other node"}); err != nil {
		t.Fatalf("a new thread on the other node, after the lost answer: %v", err)
	}
}
