package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/transport"
)

// onClock is l counting its windows on clk instead of Redis's clock, so
// that a test can move the windows' time.
func onClock(l *RateLimiter, clk *testclock.Clock) *RateLimiter {
	l.clock = clk.Now
	return l
}

// TestRateLimiterAcrossNodes: two nodes share the windows (on a test
// clock for the windows: TestRateWindowsSlideOnRedisClock has Redis's).
func TestRateLimiterAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	clk := testclock.New(time.UnixMilli(1792778400000))
	a := onClock(NewRateLimiter(openStore(t, srv, Options{}), chatrelay.Windows{PerThread: 3, PerIP: 5, Window: 10 * time.Minute}), clk)
	b := onClock(NewRateLimiter(openStore(t, srv, Options{}), chatrelay.Windows{PerThread: 3, PerIP: 5, Window: 10 * time.Minute}), clk)
	ctx := t.Context()
	const th, ip = "a1b2c3d4e5f60718", "192.0.2.7"

	must[func(bool)](t)(a.Take(ctx, th, ip))
	clk.Advance(time.Minute)
	must[func(bool)](t)(b.Take(ctx, th, ip))
	undo := must[func(bool)](t)(a.Take(ctx, th, ip))
	_, err := b.Take(ctx, th, ip)
	he := wantCode(t, err, chatrelay.RateLimited)
	if he.Retry != 9*time.Minute {
		t.Fatalf("retry %s, want 9m (the first post leaves the window then)", he.Retry)
	}
	undo(false) // the third post was not stored after all
	undo(false) // twice does nothing
	must[func(bool)](t)(b.Take(ctx, th, ip))
	_, err = a.Take(ctx, th, ip)
	wantCode(t, err, chatrelay.RateLimited)

	// The IP window, across threads: 3 posts so far, 2 more allowed.
	must[func(bool)](t)(a.Take(ctx, "0000000000000001", ip))
	must[func(bool)](t)(b.Take(ctx, "0000000000000002", ip))
	_, err = a.Take(ctx, "0000000000000003", ip)
	wantCode(t, err, chatrelay.RateLimited)
	must[func(bool)](t)(b.Take(ctx, "0000000000000003", "192.0.2.8"))

	// The window slides: at 10m after the first post, one slot frees.
	clk.Advance(9 * time.Minute)
	must[func(bool)](t)(b.Take(ctx, th, ip))
	_, err = a.Take(ctx, th, ip)
	wantCode(t, err, chatrelay.RateLimited)
}

// TestStreamLimiterAcrossNodes: the limits count both nodes' streams, a
// release frees a place, leases are renewed while held, and the streams of
// a node that stops renewing (crashed) are forgotten after one lease.
func TestStreamLimiterAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	sa, sb := openStore(t, srv, Options{}), openStore(t, srv, Options{})
	const lease = 2 * time.Second
	a := NewStreamLimiter(sa, chatrelay.StreamLimits{PerThread: 2, PerIP: 3}, lease)
	b := NewStreamLimiter(sb, chatrelay.StreamLimits{PerThread: 2, PerIP: 3}, lease)
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"

	relA := must[func()](t)(a.Acquire(ctx, th, "192.0.2.1", chatrelay.OwnerStream))
	must[func()](t)(b.Acquire(ctx, th, "192.0.2.2", chatrelay.OwnerStream))
	_, err := b.Acquire(ctx, th, "192.0.2.3", chatrelay.OwnerStream)
	if he := wantCode(t, err, chatrelay.TooManyStreams); he.Retry <= 0 {
		t.Fatalf("no retry: %+v", he)
	}
	relA()
	relA()
	relA = must[func()](t)(a.Acquire(ctx, th, "192.0.2.1", chatrelay.OwnerStream))

	// Per IP, across threads and nodes: 192.0.2.1 holds 1, may hold 3.
	must[func()](t)(b.Acquire(ctx, "0000000000000001", "192.0.2.1", chatrelay.OwnerStream))
	must[func()](t)(a.Acquire(ctx, "0000000000000002", "192.0.2.1", chatrelay.OwnerStream))
	_, err = b.Acquire(ctx, "0000000000000003", "192.0.2.1", chatrelay.OwnerStream)
	wantCode(t, err, chatrelay.TooManyStreams)

	// Held leases outlive their first period: they are renewed.
	key := sa.prefix + "{sl}:t:" + th
	first := sa.rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
	if len(first) != 2 {
		t.Fatalf("leases %+v", first)
	}
	assert.Eventually(t, 10*time.Second, "both nodes to renew their leases", func() bool {
		now := sa.rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
		if len(now) != 2 {
			t.Fatalf("leases %+v", now)
		}
		renewed := 0
		for _, z := range now {
			for _, f := range first {
				if z.Member == f.Member && z.Score >= f.Score+float64(lease.Milliseconds()) {
					renewed++
				}
			}
		}
		return renewed == 2
	})
	_, err = b.Acquire(ctx, th, "192.0.2.9", chatrelay.OwnerStream)
	wantCode(t, err, chatrelay.TooManyStreams)

	// Node a "crashes": it stops renewing and never releases.
	a.Close()
	assert.Eventually(t, 10*time.Second, "a's lease to expire", func() bool {
		_, err := b.Acquire(ctx, th, "192.0.2.9", chatrelay.OwnerStream)
		return err == nil
	})
	_ = relA
}

// TestStreamLimiterKeepsTheOwnersShare: a thread's participants hold at
// most their share of its streams, counted across nodes (4 per thread: 3
// for participants, 1 kept for the owner); their leases are renewed like
// the others, and a release gives a participant's place back.
func TestStreamLimiterKeepsTheOwnersShare(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	sa, sb := openStore(t, srv, Options{}), openStore(t, srv, Options{})
	const lease = 2 * time.Second
	lim := chatrelay.StreamLimits{PerThread: 4, PerIP: 100}
	a, b := NewStreamLimiter(sa, lim, lease), NewStreamLimiter(sb, lim, lease)
	ctx := t.Context()
	const th = "a1b2c3d4e5f60718"

	rel := must[func()](t)(a.Acquire(ctx, th, "192.0.2.1", chatrelay.ParticipantStream))
	must[func()](t)(b.Acquire(ctx, th, "192.0.2.2", chatrelay.ParticipantStream))
	must[func()](t)(a.Acquire(ctx, th, "192.0.2.3", chatrelay.ParticipantStream))
	_, err := b.Acquire(ctx, th, "192.0.2.4", chatrelay.ParticipantStream)
	wantCode(t, err, chatrelay.TooManyStreams)
	// Another thread's participants have their own share.
	must[func()](t)(b.Acquire(ctx, "0000000000000001", "192.0.2.4", chatrelay.ParticipantStream))

	// The participants' leases outlive their first period: still full.
	key := sa.prefix + "{sl}:p:" + th
	first := sa.rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
	assert.Eventually(t, 10*time.Second, "the participants' leases to be renewed", func() bool {
		now := sa.rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
		if len(now) != 3 {
			t.Fatalf("participants' leases %+v", now)
		}
		for _, z := range now {
			for _, f := range first {
				if z.Member == f.Member && z.Score < f.Score+float64(lease.Milliseconds()) {
					return false
				}
			}
		}
		return true
	})
	_, err = a.Acquire(ctx, th, "192.0.2.4", chatrelay.ParticipantStream)
	wantCode(t, err, chatrelay.TooManyStreams)

	// The owner's place is there.
	must[func()](t)(a.Acquire(ctx, th, "192.0.2.5", chatrelay.OwnerStream))

	// A participant's release frees a participant's place; the thread is
	// then full for everyone.
	rel()
	must[func()](t)(b.Acquire(ctx, th, "192.0.2.4", chatrelay.ParticipantStream))
	_, err = b.Acquire(ctx, th, "192.0.2.6", chatrelay.OwnerStream)
	wantCode(t, err, chatrelay.TooManyStreams)
}

// TestRateLimiterDecidesAsInMemory: the Redis windows decide every post as
// the in-memory limiter of one node (the file store's) does, wait
// included: random posts from two nodes to a few threads and addresses,
// some taken back (undo), the clock moving on by random steps (the
// windows' clock, which tests may move: Redis's otherwise). The larger
// limits let a window hold more than the 64 posts after which it drops its
// expired head.
func TestRateLimiterDecidesAsInMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	for _, c := range []struct {
		w    chatrelay.Windows
		step time.Duration // the most the clock moves between posts
	}{
		{chatrelay.Windows{PerThread: 3, PerIP: 5, Window: 10 * time.Minute}, 200 * time.Second},
		{chatrelay.Windows{PerThread: 70, PerIP: 150, Window: time.Minute}, 300 * time.Millisecond},
	} {
		w := c.w
		clk := testclock.New(time.UnixMilli(1792778400000))
		prefix := fmt.Sprintf("w%d:", w.PerThread)
		nodes := []*RateLimiter{
			onClock(NewRateLimiter(openStore(t, srv, Options{Prefix: prefix}), w), clk),
			onClock(NewRateLimiter(openStore(t, srv, Options{Prefix: prefix}), w), clk),
		}
		ref := transport.NewMemoryLimiter(w, clk.Now)
		rng := rand.New(rand.NewPCG(1, uint64(w.PerThread)))
		ctx := t.Context()
		accepted := 0
		for i := range 3000 {
			if rng.IntN(3) == 0 {
				clk.Advance(time.Duration(rng.Int64N(c.step.Milliseconds())) * time.Millisecond)
			}
			th, ip := fmt.Sprintf("%016x", rng.IntN(3)), fmt.Sprintf("192.0.2.%d", rng.IntN(2))
			want, werr := ref.Take(ctx, th, ip)
			got, gerr := nodes[rng.IntN(2)].Take(ctx, th, ip)
			if chatrelay.CodeOf(gerr) != chatrelay.CodeOf(werr) || (werr != nil && (gerr == nil || retryOf(gerr) != retryOf(werr))) {
				t.Fatalf("%s, post %d: got %v, want %v", prefix, i, gerr, werr)
			}
			if werr == nil {
				accepted++
				// Settled at once (the model's Retry-After is shorter
				// while a post is in flight): one in ten not stored.
				stored := rng.IntN(10) != 0
				want(stored)
				got(stored)
			}
		}
		if accepted < 300 {
			t.Fatalf("%s: only %d posts accepted: the test does not fill the windows and empty them", prefix, accepted)
		}
	}
}

func retryOf(err error) time.Duration {
	var he *chatrelay.Error
	if errors.As(err, &he) {
		return he.Retry
	}
	return -1
}

// TestStreamLimiterReleasesWhenRedisIsFull: a full Redis (maxmemory with
// noeviction) still takes a stream's lease (the script's first write lets
// it past the OOM check) but refuses every MULTI; a stream that then
// fails (its backlog read refused: the first read of a data set, which
// creates its generation) must still free its place, or a page retrying
// against a full Redis holds every place of its thread and is refused
// too_many_streams for a whole lease after Redis has room again.
func TestStreamLimiterReleasesWhenRedisIsFull(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	l := NewStreamLimiter(s, chatrelay.StreamLimits{PerThread: 2, PerIP: 100}, time.Minute)
	ctx := t.Context()
	const th, ip = "a1b2c3d4e5f60718", "192.0.2.1"
	rdb := srv.Client(t)
	// A place held, so that the thread's set exists, as it does for a
	// thread with a page open.
	must[func()](t)(l.Acquire(ctx, th, ip, chatrelay.OwnerStream))

	fillRedis(t, rdb)
	for i := range 5 { // a page retrying a stream whose backlog read fails
		rel, err := l.Acquire(ctx, th, ip, chatrelay.OwnerStream)
		if err != nil {
			wantCode(t, err, chatrelay.StoreUnavailable)
			continue
		}
		t.Logf("attempt %d took a lease on the full Redis", i)
		rel()
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, th, ip, chatrelay.OwnerStream); err != nil {
		t.Fatalf("Redis has room again, the thread holds 1 stream of 2: %v", err)
	}
}

// fillRedis makes rdb full (redistest.Fill) and checks that a write is
// refused with OOM.
func fillRedis(t *testing.T, rdb *redis.Client) {
	t.Helper()
	redistest.Fill(t, rdb)
	if err := rdb.Set(t.Context(), "probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a write to the full Redis: %v, want OOM", err)
	}
}

// TestStreamLeaseHoldsNoRequest: an open stream's lease must not keep its
// request's context alive. The transport's request context reaches the
// connection's net/http buffers and the request's headers (about 12 KiB a
// stream): a release that kept the context held all of it for as long as
// the stream stayed open, and an idle stream on Redis cost 28.5 KiB of
// memory against 15.6 on the file store (chatbench S3).
func TestStreamLeaseHoldsNoRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := openStore(t, srv, Options{})
	l := NewStreamLimiter(s, chatrelay.StreamLimits{PerThread: 2, PerIP: 100}, time.Minute)
	const th, ip = "a1b2c3d4e5f60718", "192.0.2.1"

	type requestKey struct{}
	collected := make(chan struct{})
	release := func() func() {
		req := new([12 << 10]byte) // a request's buffers
		runtime.AddCleanup(req, func(ch chan struct{}) { close(ch) }, collected)
		ctx := context.WithValue(t.Context(), requestKey{}, req)
		return must[func()](t)(l.Acquire(ctx, th, ip, chatrelay.OwnerStream))
	}()
	leases := func() int64 { return srv.Client(t).ZCard(t.Context(), s.limits+"{sl}:t:"+th).Val() }
	assert.Equal(t, "the thread's stream leases while the stream is open", leases(), int64(1))
	deadline := time.After(5 * time.Second)
	for done := false; !done; {
		runtime.GC()
		select {
		case <-collected:
			done = true
		case <-deadline:
			t.Fatal("the request's context is still reachable while its stream's lease is held")
		case <-time.After(10 * time.Millisecond):
		}
	}
	release()
	assert.Equal(t, "the thread's stream leases after the release", leases(), int64(0))
}
